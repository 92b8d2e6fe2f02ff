/* Op tests, part 5: blockwise attention, forward (out and lse) and backward (dqkv),
 * causal and not, with head sizes 16 to 128, T not a multiple of the 64-row blocks,
 * fewer heads (B * NH) than threads, few kv heads per thread (the backward cut into
 * query chunks), and grouped-query attention (NKV < NH), run with
 * every tile kernel this CPU supports (AVX-512, AVX2, portable), whose products and
 * transposes are also checked alone; the cached attention of generation. The group
 * sums are checked in test_ops_llama.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/tile.h"
#include "check.h"
#include "ops_reference.h"
#include "ops_util.h"
#include "test_ops.h"

typedef struct att_ctx {
    double *qkv, *row;
    const double *R;
    const hg_attention_shape *s;
} att_ctx;

/* L = sum(out * R) over the rows element i of qkv moves: a query its own row of its
 * head; a key or value every row that sees it, in each query head of its group. */
static double att_loss(void *v, size_t i) {
    att_ctx *c = v;
    const hg_attention_shape *s = c->s;
    const int hs = s->hs, C = s->NH * hs, T = s->T, NKV = hg_attention_kv_heads(s), rep = s->NH / NKV;
    const int W = (s->NH + 2 * NKV) * hs;
    int j = (int)(i % (size_t)W), bt = (int)(i / (size_t)W), b = bt / T, t = bt % T;
    int h0, h1, t0, t1;
    if (j < C) {
        h0 = j / hs, h1 = h0 + 1, t0 = t, t1 = t + 1;
    } else {
        int g = (j - C) / hs % NKV; /* k, then v */
        h0 = g * rep, h1 = h0 + rep, t0 = s->causal ? t : 0, t1 = T;
    }
    double L = 0.0, lse;
    for (int h = h0; h < h1; h++)
        for (int tt = t0; tt < t1; tt++) {
            ref_attention_row(c->row, &lse, c->qkv, s, b, h, tt);
            for (int d = 0; d < hs; d++) L += c->row[d] * c->R[((size_t)b * T + tt) * C + h * hs + d];
        }
    return L;
}

/* A shape's words for the checks' names. */
static void describe(char *tag, size_t n, const hg_attention_shape *s) {
    snprintf(tag, n, "attention B=%d T=%d NH=%d NKV=%d hs=%d %s cap=%g window=%d%s", s->B, s->T, s->NH,
             hg_attention_kv_heads(s), s->hs, s->causal ? "causal" : "full", (double)s->softcap, s->window,
             s->pos ? " documents" : "");
}

/* Blockwise attention of shape s (NKV < NH: grouped-query; softcap, window, documents
 * as the shape says) against the double reference and finite differences. */
static void test_attention_shape(hg_backend *bes[OPS_NBE], const hg_attention_shape s, size_t nfd) {
    const int B = s.B, T = s.T, NH = s.NH, hs = s.hs, causal = s.causal, NKV = s.NKV;
    const int C = NH * hs, KV = hg_attention_kv_heads(&s), W = (NH + 2 * KV) * hs;
    const size_t NQ = (size_t)B * T * W, NO = (size_t)B * T * C, NL = (size_t)B * NH * T;
    trng r = trng_seed(900 + (uint64_t)T * 4 + (uint64_t)hs + (uint64_t)causal + (uint64_t)NKV * 1000 +
                       (uint64_t)s.window * 7);
    float *qkv = fvec(NQ), *R = fvec(NO);
    fill_qkv(qkv, (size_t)B * T, W, (NH + KV) * hs, &r);
    fill(R, NO, &r, -1, 1);
    double *qkvd = dvec(NQ), *Rd = dvec(NO), *out_ref = dvec(NO), *lse_ref = dvec(NL), *g = dvec(NQ);
    widen(qkvd, qkv, NQ), widen(Rd, R, NO);
    ref_attention_forward(out_ref, lse_ref, qkvd, &s);
    ref_attention_backward(g, Rd, qkvd, &s);
    double sg = rms(g, NQ);

    size_t k, *idx = sample_indices(NQ, nfd, 41, &k);
    double *fd = dvec(k), *row = dvec(hs);
    att_ctx ctx = {qkvd, row, Rd, &s};
    for (size_t j = 0; j < k; j++) fd[j] = fd_central(qkvd, idx[j], FD_H, att_loss, &ctx);
    char tag[160], name[240];
    describe(tag, sizeof tag, &s);
    snprintf(name, sizeof name, "%s ref dqkv vs fd", tag);
    check_failures += check_grad_d(name, g, fd, idx, k, NULL, sg, FD_TOL);

    float *out[2] = {fvec(NO), fvec(NO)}, *lse[2] = {fvec(NL), fvec(NL)}, *dqkv[2] = {fvec(NQ), fvec(NQ)};
    const char *tile0 = tile_active()->name;
    for (const tile_kernel *const *tk = tile_kernels(); *tk; tk++) {
        if (!tile_use((*tk)->name)) continue; /* not run by this CPU */
        for (int kb = 0; kb < OPS_NBE; kb++) {
            hg_backend *be = bes[kb];
            use_backend(be);
            size_t bytes = be->ops->attention_scratch_bytes(be, &s);
            float *scratch = fvec(bytes / sizeof(float));
            describe(tag, sizeof tag, &s);
            snprintf(tag + strlen(tag), sizeof tag - strlen(tag), " threads=%d tiles=%s", be->threads, (*tk)->name);
            for (int run = 0; run < 2; run++) {
                poison(out[run], NO), poison(lse[run], NL), poison(scratch, bytes / sizeof(float));
                CHECK_OK(be->ops->attention_forward(be, out[run], lse[run], qkv, &s, scratch));
            }
            for (int run = 0; run < 2; run++) {
                poison(dqkv[run], NQ), poison(scratch, bytes / sizeof(float));
                CHECK_OK(be->ops->attention_backward(be, dqkv[run], R, qkv, out[0], lse[0], &s, scratch));
            }
            snprintf(name, sizeof name, "%s out", tag);
            check_failures += check_bitwise(name, out[0], out[1], NO) + check_finite(name, out[0], NO);
            /* out is a convex combination of v rows (|v| <= 1): its error is the scores'
             * (hs-term dots of size ~|q||k|/sqrt(hs) ~ 5, so ~sqrt(hs) u * 5 relative in
             * each p) plus the T-term weighted sum: 4e-6 absolute, ~10x what is seen */
            check_failures += check_vec(name, out[0], out_ref, NULL, NO, 0.0, 4e-6);
            snprintf(name, sizeof name, "%s lse", tag);
            check_failures += check_bitwise(name, lse[0], lse[1], NL) + check_finite(name, lse[0], NL);
            check_failures += check_vec(name, lse[0], lse_ref, NULL, NL, 4e-6, 4e-6);
            snprintf(name, sizeof name, "%s dqkv", tag);
            check_failures += check_bitwise(name, dqkv[0], dqkv[1], NQ) + check_finite(name, dqkv[0], NQ);
            /* dq, dk, dv: T-term sums of products of the recomputed P (fp32, errors as
             * above) against the tensor's rms: 2e-5 */
            check_failures += check_grad(name, dqkv[0], NULL, g, NULL, NQ, NULL, sg, 2e-5);
            check_failures += check_grad(name, dqkv[0], NULL, fd, idx, k, NULL, sg, 2e-5);
            check_failures += check_rel_l2(name, dqkv[0], NULL, g, NQ, 5e-6);
            free(scratch);
        }
    }
    CHECK(tile_use(tile0));
    for (int run = 0; run < 2; run++) free(out[run]), free(lse[run]), free(dqkv[run]);
    free(qkv), free(R), free(qkvd), free(Rd), free(out_ref), free(lse_ref), free(g), free(idx), free(fd), free(row);
}

/* NKV: kv heads (0: NH); NKV < NH is grouped-query attention. cap: the scores' soft cap
 * (0: none). */
static void test_attention_capped(hg_backend *bes[OPS_NBE], int B, int T, int NH, int NKV, int hs, int causal,
                                  size_t nfd, float cap) {
    test_attention_shape(bes, (hg_attention_shape){.B = B, .T = T, .NH = NH, .hs = hs, .causal = causal, .NKV = NKV,
                                                   .softcap = cap}, nfd);
}

static void test_attention(hg_backend *bes[OPS_NBE], int B, int T, int NH, int NKV, int hs, int causal, size_t nfd) {
    test_attention_capped(bes, B, T, NH, NKV, hs, causal, nfd, 0.0f);
}

/* Packed documents of the n lengths in lens, over and over, row b starting at lens[b % n]
 * and an odd row inside a document (at position 5), under a window (0: none) and a cap:
 * pos (B, T) is filled and must outlive nothing past the call. */
static void test_attention_docs(hg_backend *bes[OPS_NBE], int B, int T, int NH, int NKV, int hs, int window,
                                float cap, const int *lens, int n, size_t nfd) {
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)B * T);
    for (int b = 0; b < B; b++) {
        int d = b % n, p = b % 2 ? 5 : 0;
        for (int t = 0; t < T; t++) {
            if (p == lens[d]) p = 0, d = (d + 1) % n;
            pos[(size_t)b * T + t] = p++;
        }
    }
    test_attention_shape(bes, (hg_attention_shape){.B = B, .T = T, .NH = NH, .hs = hs, .causal = 1, .NKV = NKV,
                                                   .softcap = cap, .window = window, .pos = pos}, nfd);
    free(pos);
}

/* attention_cached, fed the rows of one sequence in the chunks given (a prefill, single
 * rows, a second prefill), against the double reference of the whole causal sequence and
 * against the blockwise forward; the caches (NKV, T, hs) hold exactly each kv head's k
 * and v rows. NKV: kv heads (0: NH). */
static void test_attention_cached_window(hg_backend *bes[OPS_NBE], int T, int NH, int NKV, int hs, const int *chunks,
                                         int nchunks, float cap, int window) {
    const hg_attention_shape s = {.B = 1, .T = T, .NH = NH, .hs = hs, .causal = 1, .NKV = NKV, .softcap = cap,
                                  .window = window};
    const int C = NH * hs, KV = hg_attention_kv_heads(&s), W = (NH + 2 * KV) * hs;
    const size_t NQ = (size_t)T * W, NO = (size_t)T * C, NC = (size_t)KV * T * hs;
    trng r = trng_seed(950 + (uint64_t)T + (uint64_t)hs + (uint64_t)NKV * 1000);
    float *qkv = fvec(NQ);
    fill_qkv(qkv, (size_t)T, W, (NH + KV) * hs, &r);
    double *qkvd = dvec(NQ), *out_ref = dvec(NO), *lse_ref = dvec((size_t)NH * T), *blk = dvec(NO);
    widen(qkvd, qkv, NQ);
    ref_attention_forward(out_ref, lse_ref, qkvd, &s);
    float *out = fvec(NO), *outb = fvec(NO), *lse = fvec((size_t)NH * T), *kc = fvec(NC), *vc = fvec(NC);
    for (int kb = 0; kb < OPS_NBE; kb++) {
        hg_backend *be = bes[kb];
        use_backend(be);
        size_t bytes = be->ops->attention_scratch_bytes(be, &s);
        float *scratch = fvec(bytes / sizeof(float));
        poison(out, NO), poison(kc, NC), poison(vc, NC), poison(scratch, bytes / sizeof(float));
        int pos = 0;
        for (int c = 0; c < nchunks && pos < T; c++) {
            int n = chunks[c] < T - pos ? chunks[c] : T - pos;
            hg_kv_shape ks = {pos, n, T, NH, hs, NKV, cap, window};
            CHECK_OK(be->ops->attention_cached(be, out + (size_t)pos * C, kc, vc, qkv + (size_t)pos * W, &ks, scratch));
            pos += n;
        }
        CHECK(pos == T);
        poison(outb, NO), poison(lse, (size_t)NH * T), poison(scratch, bytes / sizeof(float));
        CHECK_OK(be->ops->attention_forward(be, outb, lse, qkv, &s, scratch));
        widen(blk, outb, NO);
        char name[160];
        snprintf(name, sizeof name, "attention_cached T=%d NH=%d NKV=%d hs=%d window=%d threads=%d", T, NH, KV, hs,
                 window, be->threads);
        /* the blockwise forward's budget against the reference, twice it against the
         * blockwise forward's own output */
        check_failures += check_finite(name, out, NO) + check_vec(name, out, out_ref, NULL, NO, 0.0, 4e-6);
        check_failures += check_vec(name, out, blk, NULL, NO, 0.0, 8e-6);
        int bad = 0;
        for (int g = 0; g < KV; g++)
            for (int t = 0; t < T; t++) {
                const float *row = qkv + (size_t)t * W;
                size_t at = ((size_t)g * T + t) * hs;
                bad += memcmp(kc + at, row + C + g * hs, sizeof(float) * hs) != 0;
                bad += memcmp(vc + at, row + C + (KV + g) * hs, sizeof(float) * hs) != 0;
            }
        if (bad) fprintf(stderr, "%s: %d cache rows differ from k, v\n", name, bad);
        check_failures += bad;
        free(scratch);
    }
    free(qkv), free(qkvd), free(out_ref), free(lse_ref), free(blk), free(out), free(outb), free(lse), free(kc), free(vc);
}

static void test_attention_cached(hg_backend *bes[OPS_NBE], int T, int NH, int NKV, int hs, const int *chunks,
                                  int nchunks) {
    test_attention_cached_window(bes, T, NH, NKV, hs, chunks, nchunks, 0.0f, 0);
}

/* One tile kernel's product, on A read in place (a_rs = lda) or transposed (a_cs = lda),
 * and its 16 x 16 transpose, against double sums; C is poisoned unless accumulated. */
static void test_tile_kernel(const tile_kernel *tk) {
    enum { LD = 80 };
    trng r = trng_seed(77);
    float *A = fvec(LD * LD), *B = fvec(LD * LD), *C = fvec(LD * LD), *C0 = fvec(LD * LD);
    fill(A, LD * LD, &r, -1, 1), fill(B, LD * LD, &r, -1, 1), fill(C0, LD * LD, &r, -1, 1);
    const int ms[] = {1, 2, 3, 5, 6, 7, 13, 16, 64}, ns[] = {16, 32, 48, 64}, ks[] = {1, 7, 16, 64};
    int bad = 0;
    for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
        for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
            for (size_t c = 0; c < sizeof ks / sizeof ks[0]; c++)
                for (int trans = 0; trans < 2; trans++)
                    for (int acc = 0; acc < 2; acc++) {
                        int m = ms[a], n = ns[b], k = ks[c];
                        ptrdiff_t a_rs = trans ? 1 : LD, a_cs = trans ? LD : 1;
                        if (acc) memcpy(C, C0, sizeof(float) * LD * LD);
                        else poison(C, LD * LD);
                        tk->gemm(m, n, k, A, a_rs, a_cs, B, LD, C, LD, acc);
                        for (int i = 0; i < m; i++)
                            for (int j = 0; j < n; j++) {
                                double want = acc ? C0[i * LD + j] : 0.0;
                                for (int p = 0; p < k; p++) want += (double)A[i * a_rs + p * a_cs] * B[p * LD + j];
                                /* k products of |x| <= 1 in fp32: k u each at most */
                                if (!(fabs(C[i * LD + j] - want) <= 1e-6 * (k + 1))) bad++;
                            }
                    }
    if (bad) fprintf(stderr, "tile kernel %s: %d product elements wrong\n", tk->name, bad), check_failures++;
    poison(C, LD * LD);
    tk->transpose16(A + 3 * LD + 5, LD, C + 2, LD);
    bad = 0;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) bad += C[2 + i * LD + j] != A[(3 + j) * LD + 5 + i];
    if (bad) fprintf(stderr, "tile kernel %s: %d transposed elements wrong\n", tk->name, bad), check_failures++;
    free(A), free(B), free(C), free(C0);
}

int test_ops_attention(hg_backend *bes[OPS_NBE]) {
    for (const tile_kernel *const *tk = tile_kernels(); *tk; tk++) {
        printf("tile kernel %s: %s\n", (*tk)->name, (*tk)->supported() ? "tested" : "not supported by this CPU");
        if ((*tk)->supported()) test_tile_kernel(*tk);
    }
    const int prefill_then_rows[] = {5, 1, 1, 1, 20, 1, 1000};
    test_attention_cached(bes, 37, 3, 0, 32, prefill_then_rows, 7);
    const int rows[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    test_attention_cached(bes, 17, 2, 0, 16, rows, 17);
    const int whole[] = {130};
    test_attention_cached(bes, 130, 1, 0, 128, whole, 1);
    test_attention_cached(bes, 37, 2, 1, 256, prefill_then_rows, 7);
    test_attention_cached(bes, 37, 6, 2, 16, prefill_then_rows, 7); /* grouped-query */
    test_attention_cached(bes, 17, 4, 1, 32, rows, 17);             /* multi-query */
    test_attention_cached(bes, 130, 6, 2, 16, whole, 1);
    test_attention(bes, 2, 37, 3, 0, 32, 1, 200);  /* the model's shape: one partial block */
    test_attention(bes, 2, 37, 3, 0, 32, 0, 200);
    test_attention(bes, 1, 100, 1, 0, 16, 1, 150); /* one head for two threads; two blocks */
    test_attention(bes, 1, 65, 2, 0, 16, 1, 150);  /* a last block of one row */
    test_attention(bes, 1, 130, 2, 0, 64, 0, 120); /* three blocks, non-causal */
    test_attention(bes, 1, 130, 1, 0, 128, 1, 100);
    test_attention(bes, 2, 100, 1, 0, 128, 0, 100);
    test_attention(bes, 1, 70, 2, 1, 256, 1, 80);  /* Gemma's head size, grouped */
    /* Gemma 2's soft cap on the scores (|scores| up to ~5 here: a cap of 2.5 bends them),
     * with full and masked blocks, grouped-query, and through the KV cache */
    test_attention_capped(bes, 2, 130, 4, 2, 32, 1, 100, 2.5f);
    test_attention_capped(bes, 1, 37, 2, 0, 16, 0, 100, 1.0f);
    test_attention_cached_window(bes, 37, 2, 1, 32, prefill_then_rows, 7, 2.5f, 0);
    test_attention(bes, 1, 1, 2, 0, 16, 1, 100);   /* T = 1: out = v */
    test_attention(bes, 2, 37, 6, 2, 16, 1, 150);  /* grouped-query: one partial block */
    test_attention(bes, 2, 37, 4, 1, 16, 1, 150);  /* multi-query */
    test_attention(bes, 2, 37, 6, 2, 16, 0, 100);  /* non-causal */
    test_attention(bes, 2, 130, 6, 2, 16, 1, 100); /* three blocks, their diagonal slabs */
    test_attention(bes, 2, 130, 4, 1, 16, 1, 100);
    /* five query blocks, the last partial: key blocks wholly seen beside the diagonal ones */
    test_attention(bes, 1, 300, 2, 0, 32, 1, 60);
    test_attention(bes, 1, 300, 4, 2, 16, 1, 60);
    /* few groups for two threads: the backward cuts each group's ten query blocks into
     * chunks, the first ones of several blocks */
    test_attention(bes, 3, 600, 1, 0, 16, 1, 30);
    test_attention(bes, 1, 600, 4, 2, 16, 1, 30);
    /* Sliding windows: one block wide, across blocks, a single key, under the cap, longer
     * than T; and through the KV cache */
    const hg_attention_shape win = {.B = 2, .T = 300, .NH = 4, .hs = 16, .causal = 1, .NKV = 2};
    const int widths[] = {64, 37, 1, 130, 400};
    for (int i = 0; i < 5; i++) {
        hg_attention_shape w = win;
        w.window = widths[i];
        w.softcap = i == 3 ? 2.5f : 0.0f;
        test_attention_shape(bes, w, 40);
    }
    test_attention_cached_window(bes, 130, 6, 2, 16, prefill_then_rows, 7, 0.0f, 40);
    test_attention_cached_window(bes, 17, 2, 1, 32, rows, 17, 2.5f, 5);
    /* Packed documents: lengths of 1, below and across the 64-row blocks, a row starting
     * inside a document; with a window shorter than some documents, and a cap; few groups,
     * so that the backward's query chunks see only some key blocks */
    const int lens[] = {1, 70, 64, 100, 65, 3, 130};
    test_attention_docs(bes, 2, 300, 4, 2, 16, 0, 0.0f, lens, 7, 50);
    test_attention_docs(bes, 2, 300, 3, 0, 32, 50, 2.5f, lens, 7, 50);
    test_attention_docs(bes, 1, 600, 4, 2, 16, 0, 0.0f, lens + 1, 6, 30);
    test_attention_docs(bes, 1, 600, 4, 1, 16, 90, 0.0f, lens + 3, 4, 30);
    return check_failures;
}
