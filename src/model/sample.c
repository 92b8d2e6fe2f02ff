/* Drawing the next token from a row of logits: temperature, top-k and top-p (nucleus),
 * and the repetition penalty applied to the logits before them.
 *
 * Neither cut-off sorts or allocates: each is a threshold found by bisection over the
 * ordered bit patterns of the floats, 32 passes over V values, and tokens tied with the
 * threshold are kept. The draw walks the kept probabilities in id order, so a seed gives
 * the same token on every machine. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "handgrad.h"

/* Maps floats (not NaN) to uint32 in the same order. */
static uint32_t order_key(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

/* The largest key t such that weight(values >= t) >= need, where the weight of a value
 * is 1 (count == 1) or the value itself; the cut-off of top-k and top-p. */
static uint32_t threshold(const float *x, int V, double need, int count) {
    uint32_t lo = 0, hi = UINT32_MAX;
    while (lo < hi) {
        uint32_t mid = lo + (uint32_t)(((uint64_t)hi - lo + 1) / 2);
        double w = 0.0;
        for (int i = 0; i < V; i++)
            if (order_key(x[i]) >= mid) w += count ? 1.0 : (double)x[i];
        if (w >= need) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Uniform in [0, 1) from a splitmix64 step of the caller's state. */
static double next_unit(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

hg_status hg_sample(float *logits, int V, const hg_sampling *s, uint64_t *rng, int32_t *out) {
    if (!logits || !s || !rng || !out) return hg_fail(HG_ERR_INVALID, "hg_sample: NULL argument");
    if (V <= 0) return hg_fail(HG_ERR_INVALID, "hg_sample: V must be positive, got %d", V);
    if (!(s->temperature >= 0.0f && s->temperature <= 1e6f))
        return hg_fail(HG_ERR_INVALID, "temperature must be in [0, 1e6], got %g", (double)s->temperature);
    if (s->top_k < 0) return hg_fail(HG_ERR_INVALID, "top_k must be >= 0 (0: off), got %d", s->top_k);
    if (!(s->top_p >= 0.0f && s->top_p <= 1.0f))
        return hg_fail(HG_ERR_INVALID, "top_p must be in [0, 1] (0 or 1: off), got %g", (double)s->top_p);
    int best = 0;
    for (int i = 0; i < V; i++) {
        if (isnan(logits[i]) || logits[i] == INFINITY)
            return hg_fail(HG_ERR_INVALID, "logits[%d] is %g", i, (double)logits[i]);
        if (logits[i] > logits[best]) best = i;
    }
    float top = logits[best];
    if (s->temperature == 0.0f || s->top_k == 1 || top == -INFINITY) {
        *out = best;
        return HG_OK;
    }
    for (int i = 0; i < V; i++) logits[i] = (logits[i] - top) / s->temperature;
    if (s->top_k > 0 && s->top_k < V) {
        uint32_t t = threshold(logits, V, (double)s->top_k, 1);
        for (int i = 0; i < V; i++)
            if (order_key(logits[i]) < t) logits[i] = -INFINITY;
    }
    double total = 0.0;
    for (int i = 0; i < V; i++) total += logits[i] = expf(logits[i]); /* the best token's is 1 */
    if (s->top_p > 0.0f && s->top_p < 1.0f) {
        uint32_t t = threshold(logits, V, (double)s->top_p * total, 0);
        total = 0.0;
        for (int i = 0; i < V; i++) {
            if (order_key(logits[i]) < t) logits[i] = 0.0f;
            total += logits[i];
        }
    }
    double target = next_unit(rng) * total, acc = 0.0;
    *out = best;
    for (int i = 0; i < V; i++) {
        if (logits[i] <= 0.0f) continue;
        acc += logits[i];
        *out = i;
        if (acc > target) break;
    }
    return HG_OK;
}

hg_status hg_apply_repetition_penalty(float *logits, int V, const int32_t *ids, size_t n, float penalty) {
    if (!logits || (!ids && n)) return hg_fail(HG_ERR_INVALID, "hg_apply_repetition_penalty: NULL argument");
    if (V <= 0) return hg_fail(HG_ERR_INVALID, "hg_apply_repetition_penalty: V must be positive, got %d", V);
    if (!(penalty > 0.0f && penalty < INFINITY))
        return hg_fail(HG_ERR_INVALID, "repetition penalty must be finite and > 0 (1: off), got %g", (double)penalty);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return hg_fail(HG_ERR_INVALID, "ids[%zu]: %d is outside the vocabulary [0, %d)", i, (int)ids[i], V);
    if (penalty == 1.0f || n == 0) return HG_OK;
    uint8_t *seen = calloc(((size_t)V + 7) / 8, 1); /* each id once, however often it occurs */
    if (!seen) return hg_fail(HG_ERR_NOMEM, "hg_apply_repetition_penalty: out of memory for %d bits", V);
    for (size_t i = 0; i < n; i++) {
        const int32_t id = ids[i];
        if (seen[id / 8] & (1u << (id % 8))) continue;
        seen[id / 8] |= (uint8_t)(1u << (id % 8));
        logits[id] = logits[id] > 0.0f ? logits[id] / penalty : logits[id] * penalty;
    }
    free(seen);
    return HG_OK;
}
