/* Generation: logits through the KV cache equal the full forward's at every position,
 * whatever the prompt length and however the tokens are fed (one prefill, single tokens,
 * several chunks), and after a truncated cache is fed again; the cache refuses what does
 * not fit; hg_sample's properties (greedy and its limits, the distribution against
 * softmax by a chi-square bound, top-k and top-p supports, determinism per seed); and
 * the repetition penalty's values, worked out by hand. */
#include <stdint.h>

#include "check.h"
#include "handgrad.h"

/* Tolerance against the full forward, relative to the row's largest |logit|: the two
 * paths differ only in the attention's summation order (measured ~1e-7). */
#define KV_TOL 1e-5

static uint64_t lcg(uint64_t *s) { return (*s = *s * 6364136223846793005ull + 1442695040888963407ull) >> 33; }

/* Parameters ~N(0, 0.1)-ish uniform: larger than GPT-2's init, so the attention is far
 * from uniform and a wrong key or position shows in the logits. */
static void randomise(hg_model *m, uint64_t seed) {
    for (int i = 0; i < hg_param_count(m); i++) {
        hg_param_info p;
        CHECK_OK(hg_param_at(m, i, &p));
        for (int64_t j = 0; j < p.numel; j++) p.data[j] = ((float)(lcg(&seed) % 20001) / 10000.0f - 1.0f) * 0.17f;
    }
}

static float row_max(const float *x, int n) {
    float mx = 0;
    for (int i = 0; i < n; i++) mx = fabsf(x[i]) > mx ? fabsf(x[i]) : mx;
    return mx;
}

/* Feeds tokens[0..T) through the cache in the given chunk sizes (cycled) and compares
 * the logits after each chunk with row (pos - 1) of the full forward. */
static void check_chunks(hg_model *kv, const int32_t *tok, int T, const float *full, int V, const int *chunks,
                         int nchunks, const char *what) {
    float *lg = malloc(sizeof(float) * V);
    CHECK_OK(hg_kv_reset(kv));
    int pos = 0, bad = 0;
    double worst = 0;
    for (int c = 0; pos < T; c++) {
        int n = chunks[c % nchunks];
        if (n > T - pos) n = T - pos;
        for (int i = 0; i < V; i++) lg[i] = NAN;
        CHECK_OK(hg_kv_forward(kv, tok + pos, n, lg));
        pos += n;
        CHECK(hg_kv_length(kv) == pos);
        const float *want = full + (size_t)(pos - 1) * V;
        double scale = row_max(want, V);
        for (int i = 0; i < V; i++) {
            double e = fabs((double)lg[i] - want[i]) / scale;
            if (!(e <= KV_TOL)) bad++;
            if (e > worst || e != e) worst = e;
        }
    }
    if (getenv("HG_TEST_VERBOSE")) printf("  %-40s worst %.2e of max|logit|\n", what, worst);
    if (bad) {
        fprintf(stderr, "%s: %d logits differ from the full forward (worst %.3g)\n", what, bad, worst);
        check_failures++;
    }
    free(lg);
}

/* A truncated cache forgets the positions after its new length: fed tok[h-2..h] after
 * tok[0..h), three other tokens and a truncation to h-2, the logits are those of the
 * full forward over tok[0..h]. */
static void test_truncate(hg_model *train, hg_model *kv, const int32_t *tok, int V, int cache_len) {
    const int h = cache_len / 2;
    float *full = malloc(sizeof(float) * (size_t)(h + 1) * V), *lg = malloc(sizeof(float) * V);
    CHECK_OK(hg_forward(train, tok, NULL, 1, h + 1, NULL, full));
    const int32_t other[3] = {1, (int32_t)(V - 1), 2};
    CHECK_OK(hg_kv_reset(kv));
    CHECK_OK(hg_kv_forward(kv, tok, h, lg));
    CHECK_OK(hg_kv_forward(kv, other, 3, lg));
    CHECK(hg_kv_truncate(kv, h + 4) == HG_ERR_INVALID); /* past the length */
    CHECK(hg_kv_truncate(kv, -1) == HG_ERR_INVALID);
    CHECK(hg_kv_length(kv) == h + 3);
    CHECK_OK(hg_kv_truncate(kv, h - 2));
    CHECK(hg_kv_length(kv) == h - 2);
    CHECK_OK(hg_kv_forward(kv, tok + h - 2, 3, lg));
    const float *want = full + (size_t)h * V;
    const double scale = row_max(want, V);
    int bad = 0;
    for (int i = 0; i < V; i++) bad += !(fabs((double)lg[i] - want[i]) / scale <= KV_TOL);
    CHECK(bad == 0);
    CHECK_OK(hg_kv_truncate(kv, 0));
    CHECK(hg_kv_length(kv) == 0);
    CHECK(hg_kv_truncate(train, 0) == HG_ERR_STATE); /* no cache in a training model */
    free(full), free(lg);
}

static void test_preset(const char *preset, int cache_len) {
    printf("%s, cache %d\n", preset, cache_len);
    hg_config cfg;
    CHECK_OK(hg_config_preset(preset, &cfg));
    const int V = cfg.vocab_size;
    hg_options o = hg_options_default();
    o.threads = 2, o.seed = 7, o.training = 1, o.seq_len = cache_len;
    hg_model *train = NULL, *kv = NULL;
    CHECK_OK(hg_model_create(&train, &cfg, &o));
    o.training = 0, o.seed = 8;
    CHECK_OK(hg_model_create(&kv, &cfg, &o));
    if (!train || !kv) return;
    randomise(train, 11);
    CHECK_OK(hg_model_copy_params(kv, train));

    uint64_t s = 5;
    int32_t *tok = malloc(sizeof(int32_t) * cache_len);
    for (int i = 0; i < cache_len; i++) tok[i] = (int32_t)(lcg(&s) % (uint64_t)V);
    const int lens[] = {1, 2, 7, cache_len / 2 + 1, cache_len};
    for (int k = 0; k < 5; k++) {
        int T = lens[k];
        /* the reference: the training model's plain forward over the first T tokens */
        float *full = malloc(sizeof(float) * (size_t)T * V);
        for (size_t i = 0; i < (size_t)T * V; i++) full[i] = NAN;
        CHECK_OK(hg_forward(train, tok, NULL, 1, T, NULL, full));
        char what[96];
        const int prefill[] = {T}, single[] = {1}, mixed[] = {3, 1, 5, 2, 1};
        snprintf(what, sizeof what, "%s T=%d prefill", preset, T);
        check_chunks(kv, tok, T, full, V, prefill, 1, what);
        snprintf(what, sizeof what, "%s T=%d token by token", preset, T);
        check_chunks(kv, tok, T, full, V, single, 1, what);
        snprintf(what, sizeof what, "%s T=%d mixed chunks", preset, T);
        check_chunks(kv, tok, T, full, V, mixed, 5, what);
        free(full);
    }

    /* a full cache refuses another token and keeps its length; reset empties it */
    float *lg = malloc(sizeof(float) * V);
    CHECK(hg_kv_forward(kv, tok, 1, lg) == HG_ERR_INVALID);
    CHECK(hg_kv_length(kv) == cache_len);
    CHECK_OK(hg_kv_reset(kv));
    CHECK(hg_kv_forward(kv, tok, cache_len + 1, lg) == HG_ERR_INVALID);
    int32_t badtok = V;
    CHECK(hg_kv_forward(kv, &badtok, 1, lg) == HG_ERR_INVALID);
    CHECK(hg_kv_length(kv) == 0);
    CHECK(hg_kv_forward(train, tok, 1, lg) == HG_ERR_STATE); /* no cache in a training model */
    test_truncate(train, kv, tok, V, cache_len);
    free(lg), free(tok);
    hg_model_free(train), hg_model_free(kv);
}

/* ---- sampling ---- */

static int32_t draw(const float *logits, int V, hg_sampling sp, uint64_t *rng) {
    float buf[64];
    memcpy(buf, logits, sizeof(float) * V);
    int32_t id = -1;
    CHECK_OK(hg_sample(buf, V, &sp, rng, &id));
    return id;
}

/* Draws n samples and returns the chi-square statistic of their counts against p
 * (classes with p = 0 must get no sample: a hit counts as +inf). */
static double chi_square(const float *logits, int V, hg_sampling sp, const double *p, int n, uint64_t seed) {
    int counts[64] = {0};
    uint64_t rng = seed;
    for (int i = 0; i < n; i++) {
        int32_t id = draw(logits, V, sp, &rng);
        if (id >= 0 && id < V) counts[id]++;
    }
    double x2 = 0;
    for (int c = 0; c < V; c++) {
        if (p[c] == 0) {
            if (counts[c]) return INFINITY;
            continue;
        }
        double e = n * p[c];
        x2 += (counts[c] - e) * (counts[c] - e) / e;
    }
    return x2;
}

/* softmax(logits / temp) in double over the ids kept (keep NULL: all). */
static void softmax_d(const float *logits, int V, double temp, const int *keep, double *p) {
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++) mx = fmax(mx, logits[i]);
    for (int i = 0; i < V; i++) sum += p[i] = (!keep || keep[i]) ? exp((logits[i] - mx) / temp) : 0.0;
    for (int i = 0; i < V; i++) p[i] /= sum;
}

static void test_sampling(void) {
    enum { V = 10, N = 40000 };
    const float logits[V] = {1.0f, 2.5f, -0.5f, 0.3f, 2.0f, -3.0f, 1.7f, 0.0f, -1.0f, 0.9f}; /* argmax 1 */
    uint64_t rng = 1;
    hg_sampling greedy = {0.0f, 0, 0.0f}, k1 = {1.0f, 1, 0.0f}, psmall = {1.0f, 0, 1e-4f};
    for (int i = 0; i < 20; i++) {
        CHECK(draw(logits, V, greedy, &rng) == 1);
        CHECK(draw(logits, V, k1, &rng) == 1);
        CHECK(draw(logits, V, psmall, &rng) == 1);
    }
    /* the 99.99% point of chi-square with 9 degrees of freedom is 33.7 */
    double p[V];
    for (int t = 0; t < 2; t++) {
        double temp = t ? 0.7 : 1.6;
        softmax_d(logits, V, temp, NULL, p);
        double x2 = chi_square(logits, V, (hg_sampling){(float)temp, 0, 0.0f}, p, N, 3 + t);
        printf("temperature %.1f: chi-square %.2f (9 dof)\n", temp, x2);
        CHECK(x2 < 33.7);
    }
    /* top-k 3: ids 1, 4, 6, renormalised (2 dof: 99.99% point 18.4) */
    int keep3[V] = {0, 1, 0, 0, 1, 0, 1, 0, 0, 0};
    softmax_d(logits, V, 1.0, keep3, p);
    double x2 = chi_square(logits, V, (hg_sampling){1.0f, 3, 0.0f}, p, N, 9);
    printf("top-k 3: chi-square %.2f\n", x2);
    CHECK(x2 < 18.4);
    /* top-p 0.6 at temperature 1: probabilities 0.317, 0.192, 0.157, ... so ids 1, 4, 6
     * (0.317 + 0.192 = 0.509 < 0.6 <= 0.666) */
    softmax_d(logits, V, 1.0, NULL, p);
    CHECK(p[1] + p[4] < 0.6 && p[1] + p[4] + p[6] >= 0.6);
    softmax_d(logits, V, 1.0, keep3, p);
    x2 = chi_square(logits, V, (hg_sampling){1.0f, 0, 0.6f}, p, N, 10);
    printf("top-p 0.6: chi-square %.2f\n", x2);
    CHECK(x2 < 18.4);
    /* a fixed seed repeats its sequence; another seed does not */
    uint64_t a = 42, b = 42, c = 43;
    int same = 1, differ = 0;
    hg_sampling warm = {1.0f, 0, 0.9f};
    for (int i = 0; i < 200; i++) {
        int32_t x = draw(logits, V, warm, &a), y = draw(logits, V, warm, &b), z = draw(logits, V, warm, &c);
        same &= x == y;
        differ |= x != z;
    }
    CHECK(same && differ);
    /* -inf logits are never drawn; NaN and bad settings are refused */
    float masked[V];
    for (int i = 0; i < V; i++) masked[i] = i == 7 || i == 2 ? 0.0f : -INFINITY;
    for (int i = 0; i < 100; i++) {
        int32_t id = draw(masked, V, (hg_sampling){2.0f, 0, 0.0f}, &rng);
        CHECK(id == 7 || id == 2);
    }
    float buf[V];
    int32_t id;
    memcpy(buf, logits, sizeof buf);
    buf[3] = NAN;
    CHECK(hg_sample(buf, V, &warm, &rng, &id) == HG_ERR_INVALID);
    memcpy(buf, logits, sizeof buf);
    CHECK(hg_sample(buf, V, &(hg_sampling){-1.0f, 0, 0.0f}, &rng, &id) == HG_ERR_INVALID);
    CHECK(hg_sample(buf, V, &(hg_sampling){1.0f, -2, 0.0f}, &rng, &id) == HG_ERR_INVALID);
    CHECK(hg_sample(buf, V, &(hg_sampling){1.0f, 0, 1.5f}, &rng, &id) == HG_ERR_INVALID);
}

/* CTRL's penalty as transformers applies it, on values exact in float: each distinct id
 * of the context once (2.0 becomes 1.0, not 0.5), positive logits divided, negative
 * ones multiplied, zero and -inf unchanged, the others untouched. */
static void test_repetition_penalty(void) {
    enum { V = 7 };
    const float logits[V] = {2.0f, -1.0f, 0.5f, 0.0f, -3.0f, 4.0f, -INFINITY};
    const int32_t ids[] = {0, 1, 0, 3, 4, 1, 6, 0};
    const size_t n = sizeof ids / sizeof ids[0];
    float x[V];
    memcpy(x, logits, sizeof x);
    CHECK_OK(hg_apply_repetition_penalty(x, V, ids, n, 2.0f));
    const float want2[V] = {1.0f, -2.0f, 0.5f, 0.0f, -6.0f, 4.0f, -INFINITY};
    CHECK(memcmp(x, want2, sizeof x) == 0);
    /* 1.25: 2 / 1.25 = 1.6 rounds in float; -1 * 1.25 = -1.25 and -3 * 1.25 = -3.75 exact */
    memcpy(x, logits, sizeof x);
    CHECK_OK(hg_apply_repetition_penalty(x, V, ids, n, 1.25f));
    const float want125[V] = {2.0f / 1.25f, -1.25f, 0.5f, 0.0f, -3.75f, 4.0f, -INFINITY};
    CHECK(memcmp(x, want125, sizeof x) == 0);
    CHECK(x[0] == 1.6f);
    /* below 1 the seen tokens gain: 2 / 0.5 = 4, -1 * 0.5 = -0.5 */
    memcpy(x, logits, sizeof x);
    CHECK_OK(hg_apply_repetition_penalty(x, V, ids, 2, 0.5f));
    const float want05[V] = {4.0f, -0.5f, 0.5f, 0.0f, -3.0f, 4.0f, -INFINITY};
    CHECK(memcmp(x, want05, sizeof x) == 0);
    /* 1 and an empty context change nothing */
    memcpy(x, logits, sizeof x);
    CHECK_OK(hg_apply_repetition_penalty(x, V, ids, n, 1.0f));
    CHECK_OK(hg_apply_repetition_penalty(x, V, NULL, 0, 3.0f));
    CHECK(memcmp(x, logits, sizeof x) == 0);
    /* the penalty decides greedy's choice: 3 / 2 = 1.5 < 2 */
    float two[2] = {3.0f, 2.0f};
    int32_t seen = 0, id = -1;
    uint64_t rng = 1;
    CHECK_OK(hg_apply_repetition_penalty(two, 2, &seen, 1, 2.0f));
    CHECK_OK(hg_sample(two, 2, &(hg_sampling){0.0f, 0, 0.0f}, &rng, &id));
    CHECK(two[0] == 1.5f && id == 1);
    /* refused, logits untouched: penalty <= 0, NaN or inf; ids outside [0, V) */
    memcpy(x, logits, sizeof x);
    const float bad[] = {0.0f, -1.0f, NAN, INFINITY};
    for (int i = 0; i < 4; i++) CHECK(hg_apply_repetition_penalty(x, V, ids, n, bad[i]) == HG_ERR_INVALID);
    const int32_t outside[] = {0, 7}, negative[] = {1, -1};
    CHECK(hg_apply_repetition_penalty(x, V, outside, 2, 2.0f) == HG_ERR_INVALID);
    CHECK(hg_apply_repetition_penalty(x, V, negative, 2, 2.0f) == HG_ERR_INVALID);
    CHECK(hg_apply_repetition_penalty(x, V, NULL, 1, 2.0f) == HG_ERR_INVALID);
    CHECK(memcmp(x, logits, sizeof x) == 0);
}

int main(void) {
    test_preset("tiny", 64);
    test_preset("odd", 40);
    test_preset("llama-tiny", 48); /* RoPE from the cache position, grouped-query cache */
    test_preset("qwen3-tiny", 64); /* the q/k norm in an inference model (no raw kept) */
    test_sampling();
    test_repetition_penalty();
    CHECK_DONE();
}
