/* A training step allocates nothing, profiled or not, in fp32 and in bf16, and neither
 * does generating a token through the KV cache: malloc and friends are interposed and counted across
 * steady-state steps (after one warm-up step has created the GEMM primitives).
 *
 * oneDNN's C API builds a small argument map inside every dnnl_primitive_execute call
 * (about 264 bytes in 6-7 allocations, measured), which no caller can avoid. The test
 * interposes dnnl_primitive_execute too, so allocations are attributed: none may come
 * from handgrad itself; the ones inside oneDNN must be small, freed within the call,
 * and the same in every step. Small: at most ONEDNN_SMALL bytes. oneDNN's AVX-512
 * matmuls allocate at most ~264 bytes a call; its AVX2 matmuls also allocate one buffer
 * of 16640 bytes a call, the same for every model shape here (measured 2026-11-23 with
 * ONEDNN_MAX_CPU_ISA=AVX2 on an Ice Lake Xeon, and natively on a Zen 3 EPYC), which
 * ctest runs as test_alloc_avx2. The counting is src/ext/alloc_count.c's, the library
 * hg_bench_op uses. Not built under sanitizers, which own malloc. */
#include <stdio.h>

#include "check.h"
#include "ext/alloc_count.h"
#include "handgrad.h"

/* The largest allocation oneDNN may make inside a call: about twice its fixed AVX2
 * buffer. Growth and leaks are caught by the per-step counts and the frees. */
#define ONEDNN_SMALL 32768

static int train_step(hg_model *m, const int32_t *tok, const int32_t *tgt, int B, int T) {
    hg_adamw a = hg_adamw_default();
    float loss;
    return hg_zero_grad(m) || hg_forward_backward(m, tok, tgt, B, T, 1.0f, &loss) || hg_optimizer_step(m, &a, NULL) ||
           hg_forward(m, tok, tgt, B, T, &loss, NULL) || hg_backward(m, 1.0f);
}

/* A prompt of 5 tokens, then 6 tokens each sampled from the last logits. */
static int generate(hg_model *m, float *logits, int V) {
    int32_t tok[5] = {1, 2, 3, 4, 5}, next;
    hg_sampling sp = {0.8f, 40, 0.95f};
    uint64_t rng = 3;
    if (hg_kv_reset(m) || hg_kv_forward(m, tok, 5, logits)) return 1;
    for (int i = 0; i < 6; i++)
        if (hg_sample(logits, V, &sp, &rng, &next) || hg_kv_forward(m, &next, 1, logits)) return 1;
    return 0;
}

/* Training steps (with dropout, under recompute mode r) and generation of one
 * architecture allocate nothing. */
static void check_preset(const char *preset, const char *block, hg_precision precision, hg_recompute r) {
    printf("%s, %s block%s, recompute %d\n", preset, block, precision == HG_PRECISION_BF16 ? " in bf16" : "", (int)r);
    hg_config cfg;
    CHECK_OK(hg_config_preset(preset, &cfg));
    CHECK_OK(hg_config_set(&cfg, "block", block));
    cfg.dropout = 0.1f;
    const int V = cfg.vocab_size;
    hg_options o = hg_options_default();
    o.batch = 3;
    o.seq_len = 37;
    o.threads = 2;
    o.seed = 7;
    o.precision = precision;
    o.recompute = r;
    hg_model *m = NULL;
    CHECK_OK(hg_model_create(&m, &cfg, &o));
    if (!m) return;
    int32_t tok[3 * 37], tgt[3 * 37];
    for (int i = 0; i < 3 * 37; i++) tok[i] = (i * 7919) % V, tgt[i] = i % 5 ? (i * 104729) % V : -1;
    CHECK(train_step(m, tok, tgt, 3, 37) == 0); /* warm-up: creates the GEMM primitives */

    /* the last step runs with a profiler attached: recording allocates nothing either
     * (unless profiling is compiled out, when attaching is refused) */
    hg_profiler *p = NULL;
    CHECK_OK(hg_profiler_create(&p, 10000));
    int profiled = 0;
    long per_step[3];
    hg_alloc_counts all = {0}, c;
    for (int s = 0; s < 3; s++) {
        if (s == 2) profiled = hg_model_set_profiler(m, p) == HG_OK;
        hg_alloc_count_enable(1);
        hg_profiler_step_begin(p);
        CHECK(train_step(m, tok, tgt, 3, 37) == 0);
        hg_profiler_step_end(p);
        hg_alloc_count_enable(0);
        hg_alloc_count_read(&c);
        per_step[s] = (long)c.onednn_allocs;
        all.allocs += c.allocs, all.frees += c.frees, all.onednn_allocs += c.onednn_allocs;
        all.onednn_frees += c.onednn_frees, all.onednn_bytes += c.onednn_bytes;
        if (c.onednn_largest > all.onednn_largest) all.onednn_largest = c.onednn_largest;
    }
    printf("handgrad: %ld allocations, %ld frees in 3 steps\n", (long)all.allocs, (long)all.frees);
    printf("inside oneDNN: %ld allocations (%ld per step), %ld bytes in all, largest %ld bytes, %ld frees\n",
           (long)all.onednn_allocs, per_step[0], (long)all.onednn_bytes, (long)all.onednn_largest,
           (long)all.onednn_frees);
    CHECK(all.allocs == 0 && all.frees == 0);
    CHECK(per_step[0] == per_step[1] && per_step[1] == per_step[2]); /* no growth */
    CHECK(all.onednn_largest <= ONEDNN_SMALL);                       /* only small buffers */
    CHECK(all.onednn_allocs == all.onednn_frees);                    /* nothing kept */
    CHECK(!profiled || hg_profiler_count(p) > 100);
    hg_model_free(m);
    hg_profiler_free(p);

    o.batch = 1, o.training = 0;
    CHECK_OK(hg_model_create(&m, &cfg, &o));
    if (!m) return;
    float logits[1000];
    CHECK(V <= 1000 && generate(m, logits, V) == 0); /* warm-up */
    hg_alloc_count_enable(1);
    CHECK(generate(m, logits, V) == 0);
    hg_alloc_count_enable(0);
    hg_alloc_count_read(&c);
    printf("generation: handgrad %ld allocations; inside oneDNN %ld, largest %ld bytes\n", (long)c.allocs,
           (long)c.onednn_allocs, (long)c.onednn_largest);
    CHECK(c.allocs == 0 && c.frees == 0);
    CHECK(c.onednn_largest <= ONEDNN_SMALL && c.onednn_allocs == c.onednn_frees);
    hg_model_free(m);
}

int main(void) {
    for (int bf16 = 0; bf16 < 2; bf16++) {
        hg_precision p = bf16 ? HG_PRECISION_BF16 : HG_PRECISION_FP32;
        const hg_recompute none = HG_RECOMPUTE_NONE;
        check_preset("odd", "prenorm", p, none);        /* GPT-2 */
        check_preset("llama-tiny", "prenorm", p, none); /* RMSNorm, RoPE, SwiGLU, GQA, untied */
        check_preset("qwen2-tiny", "prenorm", p, none); /* the same with a q/k/v bias, tied */
        check_preset("qwen3-tiny", "prenorm", p, none); /* q/k norm, head_dim above d_model/n_head */
        check_preset("odd", "parallel", p, none); /* the other layouts */
        check_preset("llama-tiny", "postnorm", p, none);
        check_preset("odd", "sandwich", p, none);
        check_preset("llama-tiny", "prenorm", p, HG_RECOMPUTE_BLOCK); /* what the backward runs again */
        check_preset("odd", "sandwich", p, HG_RECOMPUTE_ATTN);
        check_preset("qwen3-tiny", "prenorm", p, HG_RECOMPUTE_MLP);
    }
    CHECK_DONE();
}
