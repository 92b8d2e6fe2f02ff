/* Frozen parameters and LoRA adapters (hg_options.freeze, hg_options.lora).
 *
 *   - the adapter ops against a float64 reference (y, h, dx, dA, dB; three modules at
 *     their column offsets; with and without dropout; fp32 and bf16), the output
 *     poisoned before each call;
 *   - a model with adapters, B = 0 as initialised: its loss is the base model's, bit for
 *     bit; with B non-zero, every adapter's gradient against central differences of the
 *     loss, on a GPT-2 and a Llama-shaped model with all four layer groups adapted;
 *   - frozen tensors have no gradient and no AdamW state (the plan's gradient and
 *     optimizer bytes are the trainable ones'), stay unchanged by steps, and leave the
 *     other gradients as they were; bad freeze globs and LoRA settings are refused, naming
 *     the field. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "check.h"
#include "core/rng.h"
#include "handgrad.h"

static double urand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* ---- the ops ---- */

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* n values of ref (double) into a buffer of the compute type; also what it holds, in vals. */
static void *put(const double *ref, size_t n, int bf16, double *vals) {
    void *p = malloc(n * (bf16 ? 2 : 4));
    for (size_t i = 0; i < n; i++) {
        if (bf16) ((uint16_t *)p)[i] = to_bf16((float)ref[i]), vals[i] = from_bf16(((uint16_t *)p)[i]);
        else ((float *)p)[i] = (float)ref[i], vals[i] = (float)ref[i];
    }
    return p;
}
static double get(const void *p, size_t i, int bf16) { return bf16 ? from_bf16(((const uint16_t *)p)[i]) : ((const float *)p)[i]; }

/* max |got - want| / max |want| over n elements */
static double rel_err(const void *got, int bf16, const double *want, size_t n) {
    double e = 0, w = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double g = get(got, i, bf16);
        if (!(g == g)) return INFINITY;
        e = fmax(e, fabs(g - want[i])), w = fmax(w, fabs(want[i]));
    }
    return e / w;
}

static void op_case(int bf16, float p) {
    enum { N = 53, K = 48, R = 4, OUT = 80 }; /* N K: two blocks of the CPU's, the last word of the mask part full */
    const int n = 3, c0[3] = {0, 32, 56}, cols[3] = {32, 16, 24};
    const float scale[3] = {2.0f, 0.5f, 4.0f};
    hg_backend *be = NULL;
    CHECK_OK(hg_backend_cpu_create(&be, 2, bf16 ? HG_PRECISION_BF16 : HG_PRECISION_FP32));
    if (!be) return;
    uint64_t seed = 5 + (uint64_t)bf16;
    double x[N * K], y0[N * OUT], dy[N * OUT], A[3][R * K], Bm[3][OUT * R], xv[N * K], y0v[N * OUT], dyv[N * OUT];
    double Av[3][R * K], Bv[3][OUT * R];
    for (int i = 0; i < N * K; i++) x[i] = urand(&seed);
    for (int i = 0; i < N * OUT; i++) y0[i] = urand(&seed), dy[i] = urand(&seed);
    hg_lora_shape s = {.N = N, .K = K, .OUT = OUT, .r = R, .n = n};
    hg_lora_weights w = {0};
    void *xb = put(x, N * K, bf16, xv), *yb = put(y0, N * OUT, bf16, y0v), *dyb = put(dy, N * OUT, bf16, dyv);
    for (int j = 0; j < n; j++) {
        s.c0[j] = c0[j], s.cols[j] = cols[j], s.scale[j] = scale[j];
        for (int i = 0; i < R * K; i++) A[j][i] = urand(&seed);
        for (int i = 0; i < cols[j] * R; i++) Bm[j][i] = urand(&seed);
        w.A[j] = put(A[j], R * K, bf16, Av[j]);
        w.B[j] = put(Bm[j], (size_t)cols[j] * R, bf16, Bv[j]);
        w.dA[j] = calloc(R * K, sizeof(float)), w.dB[j] = calloc((size_t)cols[j] * R, sizeof(float));
        for (int i = 0; i < R * K; i++) w.dA[j][i] = 0.25f; /* accumulated into */
        for (int i = 0; i < cols[j] * R; i++) w.dB[j][i] = -0.5f;
    }
    hg_dropout d = {p, 99, 3, 12345};
    /* float64 reference, from the values the buffers hold */
    double xd[N * K], h[N * n * R], y[N * OUT], dx[N * K], dA[3][R * K], dB[3][OUT * R], dh[N * n * R];
    for (int i = 0; i < N * K; i++) xd[i] = xv[i] * (p > 0 ? hg_dropout_scale(&d, (uint64_t)i) : 1.0);
    memcpy(y, y0v, sizeof y);
    for (int j = 0; j < n; j++)
        for (int r = 0; r < N; r++) {
            for (int k = 0; k < R; k++) {
                double a = 0;
                for (int c = 0; c < K; c++) a += xd[r * K + c] * Av[j][k * K + c];
                h[r * n * R + j * R + k] = scale[j] * a;
            }
            for (int c = 0; c < cols[j]; c++) {
                double a = 0;
                for (int k = 0; k < R; k++) a += h[r * n * R + j * R + k] * Bv[j][c * R + k];
                y[r * OUT + c0[j] + c] += a;
            }
        }
    for (int j = 0; j < n; j++) {
        for (int c = 0; c < cols[j]; c++)
            for (int k = 0; k < R; k++) {
                double a = 0;
                for (int r = 0; r < N; r++) a += dyv[r * OUT + c0[j] + c] * h[r * n * R + j * R + k];
                dB[j][c * R + k] = -0.5 + a;
            }
        for (int r = 0; r < N; r++)
            for (int k = 0; k < R; k++) {
                double a = 0;
                for (int c = 0; c < cols[j]; c++) a += dyv[r * OUT + c0[j] + c] * Bv[j][c * R + k];
                dh[r * n * R + j * R + k] = scale[j] * a;
            }
        for (int k = 0; k < R; k++)
            for (int c = 0; c < K; c++) {
                double a = 0;
                for (int r = 0; r < N; r++) a += dh[r * n * R + j * R + k] * xd[r * K + c];
                dA[j][k * K + c] = 0.25 + a;
            }
    }
    double dx0[N * K];
    for (int i = 0; i < N * K; i++) dx0[i] = 0.125 * ((i % 7) - 3);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < K; c++) {
            double a = 0;
            for (int j = 0; j < n; j++)
                for (int k = 0; k < R; k++) a += dh[r * n * R + j * R + k] * Av[j][k * K + c];
            dx[r * K + c] = dx0[r * K + c] + a * (p > 0 ? hg_dropout_scale(&d, (uint64_t)(r * K + c)) : 1.0);
        }
    /* the kernels, outputs poisoned first where they are written whole */
    size_t E = bf16 ? 2 : 4;
    void *hb = malloc((size_t)N * n * R * E), *scratch = malloc(hg_lora_scratch_bytes(&s, p > 0));
    uint32_t *keep = malloc(hg_lora_keep_bytes(&s));
    memset(hb, 0xff, (size_t)N * n * R * E);
    memset(keep, 0xa5, hg_lora_keep_bytes(&s));
    double dxv[N * K];
    void *dxb = put(dx0, N * K, bf16, dxv);
    CHECK_OK(be->ops->lora_forward(be, yb, hb, keep, xb, &w, &s, &d, scratch));
    int64_t wrong_bits = 0; /* the mask the forward kept, bit by bit */
    for (int i = 0; p > 0 && i < N * K; i++) wrong_bits += (int)(keep[i / 32] >> (i % 32) & 1) != (hg_dropout_scale(&d, (uint64_t)i) != 0.0f);
    CHECK(wrong_bits == 0);
    CHECK_OK(be->ops->lora_backward(be, dxb, dyb, xb, hb, keep, &w, &s, &d, scratch));
    CHECK_OK(be->ops->sync(be));
    const double tol = bf16 ? 2e-2 : 2e-6;
    double e[5] = {rel_err(yb, bf16, y, N * OUT), rel_err(hb, bf16, h, (size_t)N * n * R), rel_err(dxb, bf16, dx, N * K),
                   0, 0};
    for (int j = 0; j < n; j++) {
        e[3] = fmax(e[3], rel_err(w.dA[j], 0, dA[j], R * K));
        e[4] = fmax(e[4], rel_err(w.dB[j], 0, dB[j], (size_t)cols[j] * R));
    }
    printf("lora ops %s dropout %.1f: y %.2e h %.2e dx %.2e dA %.2e dB %.2e (tolerance %.0e)\n", bf16 ? "bf16" : "fp32",
           (double)p, e[0], e[1], e[2], e[3], e[4], tol);
    for (int i = 0; i < 5; i++) CHECK(e[i] <= tol);
    free(xb), free(yb), free(dyb), free(hb), free(scratch), free(dxb), free(keep);
    for (int j = 0; j < n; j++) free((void *)w.A[j]), free((void *)w.B[j]), free(w.dA[j]), free(w.dB[j]);
    be->ops->destroy(be);
}

/* ---- models ---- */

enum { B = 2, T = 8 };

static hg_config small(const char *preset) {
    hg_config c;
    CHECK_OK(hg_config_preset(preset, &c));
    c.n_layer = 2, c.vocab_size = 64, c.max_seq_len = 16;
    return c;
}

static void batch(int32_t *tok, int32_t *tgt, int V) {
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7 + 3) % V, tgt[i] = (i * 13 + 1) % V;
}

/* Every LoRA module of cfg adapted (q, k, v apart; gate and up apart where gated). */
static hg_lora every_module(const hg_config *c, int r) {
    hg_lora l = {.r = r, .alpha = 2.0f * r};
    l.split[HG_LORA_QKV] = 3, l.targets[HG_LORA_QKV] = 7;
    l.targets[HG_LORA_ATTN_OUT] = 1, l.targets[HG_LORA_MLP_OUT] = 1;
    l.split[HG_LORA_MLP_IN] = c->mlp == HG_MLP_SWIGLU ? 2 : 1;
    l.targets[HG_LORA_MLP_IN] = c->mlp == HG_MLP_SWIGLU ? 3 : 1;
    return l;
}

static hg_model *make_grads(const hg_config *c, hg_lora lora, const char *freeze, int training, hg_precision grads) {
    hg_options o = hg_options_default();
    o.batch = B, o.seq_len = T, o.threads = 2, o.seed = 3, o.training = training;
    o.lora = lora, o.freeze = freeze, o.grad_precision = grads;
    hg_model *m = NULL;
    CHECK_OK(hg_model_create(&m, c, &o));
    return m;
}
static hg_model *make(const hg_config *c, hg_lora lora, const char *freeze, int training) {
    return make_grads(c, lora, freeze, training, HG_PRECISION_FP32);
}

/* B = 0: the adapted model computes the base model's loss, bit for bit, and the
 * adapters' gradients are the only ones. */
static void identity_at_init(const char *preset) {
    hg_config c = small(preset);
    hg_model *base = make(&c, (hg_lora){0}, NULL, 1), *m = make(&c, every_module(&c, 4), NULL, 1);
    if (!base || !m) return;
    for (int i = 0; i < hg_param_count(base); i++) { /* adapters change no other tensor's initial values */
        hg_param_info p, q;
        CHECK_OK(hg_param_at(base, i, &p));
        CHECK_OK(hg_param_find(m, p.name, &q));
        CHECK(!memcmp(p.data, q.data, sizeof(float) * (size_t)p.numel));
    }
    int32_t tok[B * T], tgt[B * T];
    batch(tok, tgt, c.vocab_size);
    float lb, lm;
    CHECK_OK(hg_zero_grad(m));
    CHECK_OK(hg_forward(base, tok, tgt, B, T, &lb, NULL));
    CHECK_OK(hg_forward_backward(m, tok, tgt, B, T, 1.0f, &lm));
    printf("%s: base loss %.7f, with B = 0 adapters %.7f\n", preset, lb, lm);
    CHECK(lb == lm);
    int adapters = 0;
    for (int i = 0; i < hg_param_count(m); i++) {
        hg_param_info p;
        CHECK_OK(hg_param_at(m, i, &p));
        int lora = strstr(p.name, ".lora_") != NULL;
        adapters += lora;
        CHECK(p.frozen == !lora && (p.grad == NULL) == !lora && (p.adam_m == NULL) == !lora);
    }
    CHECK(adapters == 2 * 2 * (3 + 1 + (c.mlp == HG_MLP_SWIGLU ? 2 : 1) + 1));
    hg_model_free(base);
    hg_model_free(m);
}

static double loss_of(hg_model *m, const int32_t *tok, const int32_t *tgt) {
    float l = NAN;
    CHECK_OK(hg_forward(m, tok, tgt, B, T, &l, NULL));
    return l;
}

/* Adapters with random A and B: their gradients against central differences. */
static void adapter_gradients(const char *preset, int rslora) {
    hg_config c = small(preset);
    hg_lora lora = every_module(&c, 3);
    lora.rslora = rslora;
    hg_model *m = make(&c, lora, NULL, 1);
    if (!m) return;
    uint64_t seed = 17;
    for (int i = 0; i < hg_param_count(m); i++) {
        hg_param_info p;
        CHECK_OK(hg_param_at(m, i, &p));
        if (!strstr(p.name, ".lora_")) continue;
        float *v = malloc(sizeof(float) * (size_t)p.numel);
        for (int64_t k = 0; k < p.numel; k++) v[k] = (float)(0.3 * urand(&seed));
        CHECK_OK(hg_param_write(m, i, HG_PARAM_DATA, v));
        free(v);
    }
    int32_t tok[B * T], tgt[B * T];
    batch(tok, tgt, c.vocab_size);
    float loss;
    CHECK_OK(hg_zero_grad(m));
    CHECK_OK(hg_forward_backward(m, tok, tgt, B, T, 1.0f, &loss));
    double worst = 0;
    int samples = 0;
    for (int i = 0; i < hg_param_count(m); i++) {
        hg_param_info p;
        CHECK_OK(hg_param_at(m, i, &p));
        if (!strstr(p.name, ".lora_")) continue;
        float *v = malloc(sizeof(float) * (size_t)p.numel), *g = malloc(sizeof(float) * (size_t)p.numel);
        CHECK_OK(hg_param_read(m, i, HG_PARAM_DATA, v));
        CHECK_OK(hg_param_read(m, i, HG_PARAM_GRAD, g));
        for (int s = 0; s < 3; s++, samples++) {
            int64_t k = (int64_t)((urand(&seed) * 0.5 + 0.5) * (double)p.numel) % p.numel;
            const float h = 2e-3f, x = v[k];
            v[k] = x + h;
            CHECK_OK(hg_param_write(m, i, HG_PARAM_DATA, v));
            double lp = loss_of(m, tok, tgt);
            v[k] = x - h;
            CHECK_OK(hg_param_write(m, i, HG_PARAM_DATA, v));
            double lm = loss_of(m, tok, tgt);
            v[k] = x;
            CHECK_OK(hg_param_write(m, i, HG_PARAM_DATA, v));
            double fd = (lp - lm) / (2.0 * h), err = fabs(fd - g[k]);
            worst = fmax(worst, err / (2e-3 + 2e-2 * fabs(fd)));
            if (err > 2e-3 + 2e-2 * fabs(fd)) printf("  %s[%lld]: analytic %.6f, difference %.6f\n", p.name, (long long)k, g[k], fd);
        }
        free(v), free(g);
    }
    printf("%s%s: %d adapter gradient samples against central differences, worst %.2f of the tolerance\n", preset,
           rslora ? " (rsLoRA)" : "", samples, worst);
    CHECK(samples > 20 && worst <= 1.0);
    hg_model_free(m);
}

/* Frozen tensors: no gradient, no moments, no change; the others' gradients unchanged;
 * the plan's gradient bytes the trainable ones'. */
static void frozen(void) {
    hg_config c = small("odd");
    hg_model *all = make(&c, (hg_lora){0}, NULL, 1), *m = make(&c, (hg_lora){0}, "h.*.mlp.*,wte.weight", 1);
    if (!all || !m) return;
    int32_t tok[B * T], tgt[B * T];
    batch(tok, tgt, c.vocab_size);
    float la, lm;
    CHECK_OK(hg_zero_grad(all));
    CHECK_OK(hg_zero_grad(m));
    CHECK_OK(hg_forward_backward(all, tok, tgt, B, T, 1.0f, &la));
    CHECK_OK(hg_forward_backward(m, tok, tgt, B, T, 1.0f, &lm));
    CHECK(la == lm);
    size_t trained = 0;
    int nfrozen = 0;
    for (int i = 0; i < hg_param_count(m); i++) {
        hg_param_info p, q;
        CHECK_OK(hg_param_at(m, i, &p));
        CHECK_OK(hg_param_at(all, i, &q));
        int fr = strstr(p.name, ".mlp.") || !strcmp(p.name, "wte.weight");
        CHECK(p.frozen == fr && (p.grad == NULL) == fr);
        nfrozen += fr;
        if (!fr) {
            trained += ((size_t)p.numel * 4 + 63) / 64 * 64;
            CHECK(!memcmp(p.grad, q.grad, sizeof(float) * (size_t)p.numel)); /* skipping dW changes no other */
        } else {
            float g[1];
            CHECK_FAILS(hg_param_read(m, i, HG_PARAM_GRAD, g), HG_ERR_STATE, "frozen");
        }
    }
    CHECK(nfrozen == 2 * 4 + 1);
    hg_memory_plan pa = hg_model_memory(all), pm = hg_model_memory(m);
    printf("frozen mlp and wte: gradients %zu of %zu bytes, AdamW state %zu of %zu\n", pm.grads, pa.grads, pm.optimizer,
           pa.optimizer);
    CHECK(pm.grads <= trained + 64 * 16 && pm.grads < pa.grads && pm.optimizer == 2 * pm.grads);
    CHECK(pm.params == pa.params);
    /* a step changes the trained tensors only */
    hg_param_info fc;
    CHECK_OK(hg_param_find(m, "h.0.mlp.c_fc.weight", &fc));
    float *before = malloc(sizeof(float) * (size_t)fc.numel);
    memcpy(before, fc.data, sizeof(float) * (size_t)fc.numel);
    hg_adamw a = hg_adamw_default();
    float norm;
    CHECK_OK(hg_optimizer_step(m, &a, &norm));
    CHECK(!memcmp(before, fc.data, sizeof(float) * (size_t)fc.numel));
    hg_param_info qkv, qkv_all;
    CHECK_OK(hg_param_find(m, "h.0.attn.c_attn.weight", &qkv));
    CHECK_OK(hg_param_find(all, "h.0.attn.c_attn.weight", &qkv_all));
    CHECK(memcmp(qkv.data, qkv_all.data, sizeof(float) * (size_t)qkv.numel)); /* it moved */
    free(before);
    hg_model_free(all);
    hg_model_free(m);
}

/* base_precision BF16: the frozen matrices are held as their bf16 compute copy alone.
 * Their values are the fp32 masters' rounded, so a bf16 model that keeps fp32 masters
 * of a frozen base computes from the same weights: the two train bit for bit alike, the
 * held one in less memory. */
static void base_bf16(const char *preset, const char *freeze) {
    hg_config c = small(preset);
    hg_lora lora = freeze ? (hg_lora){0} : every_module(&c, 4);
    hg_model *m[2] = {0};
    for (int k = 0; k < 2; k++) {
        hg_options o = hg_options_default();
        o.batch = B, o.seq_len = T, o.threads = 2, o.seed = 3, o.lora = lora, o.freeze = freeze;
        o.precision = HG_PRECISION_BF16, o.base_precision = k ? HG_PRECISION_BF16 : HG_PRECISION_FP32;
        CHECK_OK(hg_model_create(&m[k], &c, &o));
        if (!m[k]) return;
    }
    uint64_t seed = 29;
    size_t held_bytes = 0;
    int held = 0;
    for (int i = 0; i < hg_param_count(m[0]); i++) {
        hg_param_info p, q;
        CHECK_OK(hg_param_at(m[0], i, &p));
        CHECK_OK(hg_param_at(m[1], i, &q));
        CHECK(p.dtype == HG_PRECISION_FP32 && p.data && !p.data_bf16);
        if (strstr(p.name, ".lora_")) { /* random adapters, the same in both */
            float *v = malloc(sizeof(float) * (size_t)p.numel);
            for (int64_t j = 0; j < p.numel; j++) v[j] = (float)(0.2 * urand(&seed));
            CHECK_OK(hg_param_write(m[0], i, HG_PARAM_DATA, v));
            CHECK_OK(hg_param_write(m[1], i, HG_PARAM_DATA, v));
            free(v);
        }
        if (q.dtype != HG_PRECISION_BF16) {
            CHECK(q.data && !q.data_bf16 && (!q.frozen || p.ndim == 1)); /* a norm the CPU keeps in fp32 */
            continue;
        }
        CHECK(q.frozen && !q.data && q.data_bf16 && !q.grad);
        held++, held_bytes += 4 * (size_t)q.numel;
        float *got = malloc(sizeof(float) * (size_t)q.numel);
        CHECK_OK(hg_param_read(m[1], i, HG_PARAM_DATA, got));
        int64_t bad = 0;
        for (int64_t j = 0; j < q.numel; j++) bad += got[j] != from_bf16(to_bf16(p.data[j]));
        CHECK(bad == 0);
        free(got);
    }
    hg_memory_plan pa = hg_model_memory(m[0]), pb = hg_model_memory(m[1]);
    printf("%s, base in bf16 (%s): %d tensors held in bf16; parameter memory %zu -> %zu bytes\n", preset,
           freeze ? freeze : "lora", held, pa.params, pb.params);
    CHECK(held > 0 && pa.params - pb.params >= held_bytes && pa.grads == pb.grads && pa.optimizer == pb.optimizer);
    int32_t tok[B * T], tgt[B * T];
    batch(tok, tgt, c.vocab_size);
    hg_adamw a = hg_adamw_default();
    a.lr = 1e-2f;
    for (int step = 0; step < 3; step++) {
        float l[2], norm[2];
        for (int k = 0; k < 2; k++) {
            CHECK_OK(hg_zero_grad(m[k]));
            CHECK_OK(hg_forward_backward(m[k], tok, tgt, B, T, 1.0f, &l[k]));
            CHECK_OK(hg_optimizer_step(m[k], &a, &norm[k]));
        }
        printf("  step %d: loss %.7f and %.7f, grad norm %.7f and %.7f\n", step, l[0], l[1], norm[0], norm[1]);
        CHECK(l[0] == l[1] && norm[0] == norm[1]);
    }
    for (int i = 0; i < hg_param_count(m[0]); i++) { /* the trained tensors moved alike */
        hg_param_info p, q;
        CHECK_OK(hg_param_at(m[0], i, &p));
        CHECK_OK(hg_param_at(m[1], i, &q));
        if (!p.frozen) CHECK(!memcmp(p.data, q.data, sizeof(float) * (size_t)p.numel));
    }
    /* a write rounds to bf16: 1 + 2^-9 is a tie, to even, and 1 + 3 * 2^-9 rounds up */
    int k = -1;
    for (int i = 0; i < hg_param_count(m[1]) && k < 0; i++) {
        hg_param_info q;
        CHECK_OK(hg_param_at(m[1], i, &q));
        if (q.dtype == HG_PRECISION_BF16) k = i;
    }
    hg_param_info q;
    CHECK_OK(hg_param_at(m[1], k, &q));
    float *v = malloc(sizeof(float) * (size_t)q.numel);
    for (int64_t j = 0; j < q.numel; j++) v[j] = j % 2 ? 1.0f + 3.0f / 512 : 1.0f + 1.0f / 512;
    CHECK_OK(hg_param_write(m[1], k, HG_PARAM_DATA, v));
    CHECK_OK(hg_param_read(m[1], k, HG_PARAM_DATA, v));
    CHECK(v[0] == 1.0f && v[1] == 1.0f + 4.0f / 512 && q.data_bf16[0] == 0x3F80);
    free(v);
    hg_model_free(m[0]);
    hg_model_free(m[1]);
}

/* bf16 gradients (hg_options.grad_precision) of adapters with non-zero B, and of a
 * model with frozen tensors among trained ones: each its fp32 gradient rounded to
 * nearest even, bit for bit, after one backward (their fp32 windows hold exactly what
 * the fp32 gradients would). */
static void bf16_gradients(const char *preset, hg_lora lora, const char *freeze) {
    hg_config c = small(preset);
    hg_model *m[2] = {make_grads(&c, lora, freeze, 1, HG_PRECISION_FP32), make_grads(&c, lora, freeze, 1, HG_PRECISION_BF16)};
    if (!m[0] || !m[1]) return;
    int32_t tok[B * T], tgt[B * T];
    batch(tok, tgt, c.vocab_size);
    for (int i = 0; i < hg_param_count(m[0]); i++) { /* B = 0 would make A's gradients 0 */
        hg_param_info p;
        CHECK_OK(hg_param_at(m[0], i, &p));
        if (!strstr(p.name, "lora_B")) continue;
        float *v = malloc(sizeof(float) * (size_t)p.numel);
        for (int64_t j = 0; j < p.numel; j++) v[j] = 0.01f * (float)((j * 37 + i) % 11 - 5);
        for (int k = 0; k < 2; k++) CHECK_OK(hg_param_write(m[k], i, HG_PARAM_DATA, v));
        free(v);
    }
    float l[2];
    int bad = 0, trained = 0;
    for (int k = 0; k < 2; k++) CHECK_OK(hg_forward_backward(m[k], tok, tgt, B, T, 1.0f, &l[k]));
    for (int i = 0; i < hg_param_count(m[0]); i++) {
        hg_param_info p;
        CHECK_OK(hg_param_at(m[1], i, &p));
        if (p.frozen) {
            bad += p.grad_bf16 != NULL;
            continue;
        }
        trained++;
        float *g = malloc(sizeof(float) * (size_t)p.numel), *h = malloc(sizeof(float) * (size_t)p.numel);
        CHECK_OK(hg_param_read(m[0], i, HG_PARAM_GRAD, g));
        CHECK_OK(hg_param_read(m[1], i, HG_PARAM_GRAD, h));
        for (int64_t j = 0; j < p.numel; j++) {
            float w = from_bf16(to_bf16(g[j]));
            bad += memcmp(&w, &h[j], 4) != 0;
        }
        free(g), free(h);
    }
    printf("%s (%s): %d trained tensors, %d gradient elements not their fp32 value's bf16 rounding\n", preset,
           lora.r ? "lora" : freeze, trained, bad);
    CHECK(l[0] == l[1] && bad == 0 && trained > 0);
    hg_model_free(m[0]);
    hg_model_free(m[1]);
}

static void bad_settings(void) {
    hg_config c = small("llama-tiny");
    hg_options o = hg_options_default();
    o.batch = B, o.seq_len = T;
    hg_memory_plan plan;
    o.freeze = "h.*.nothing.*";
    CHECK_FAILS(hg_memory_required(&c, &o, &plan), HG_ERR_INVALID, "h.*.nothing.*");
    o.freeze = "all";
    CHECK_FAILS(hg_memory_required(&c, &o, &plan), HG_ERR_INVALID, "freeze");
    o.training = 0;
    CHECK_OK(hg_memory_required(&c, &o, &plan));
    o.freeze = NULL, o.training = 1;
    o.lora = every_module(&c, 4);
    CHECK_OK(hg_memory_required(&c, &o, &plan));
    o.lora.r = 1000; /* above the layers' widths */
    CHECK_FAILS(hg_memory_required(&c, &o, &plan), HG_ERR_INVALID, "lora.r");
    o.lora.r = -1;
    CHECK_FAILS(hg_memory_required(&c, &o, &plan), HG_ERR_INVALID, "lora.r");
    o.lora = every_module(&c, 4);
    o.lora.split[HG_LORA_QKV] = 2;
    CHECK_FAILS(hg_memory_required(&c, &o, &plan), HG_ERR_INVALID, "lora.split");
    o.lora = every_module(&c, 4);
    o.lora.targets[HG_LORA_ATTN_OUT] = 2;
    CHECK_FAILS(hg_memory_required(&c, &o, &plan), HG_ERR_INVALID, "lora.targets");
    o.lora = (hg_lora){.r = 4, .alpha = 8};
    CHECK_FAILS(hg_memory_required(&c, &o, &plan), HG_ERR_INVALID, "lora.targets");
    o.lora = every_module(&c, 4);
    o.lora.alpha = 0;
    CHECK_FAILS(hg_memory_required(&c, &o, &plan), HG_ERR_INVALID, "lora.alpha");
    o.lora = every_module(&c, 4);
    o.lora.dropout = 1.0f;
    CHECK_FAILS(hg_memory_required(&c, &o, &plan), HG_ERR_INVALID, "lora.dropout");
    o.lora = every_module(&c, 4);
    o.base_precision = HG_PRECISION_BF16; /* in fp32 */
    CHECK_FAILS(hg_memory_required(&c, &o, &plan), HG_ERR_INVALID, "base_precision");
    o.precision = HG_PRECISION_BF16, o.lora = (hg_lora){0}; /* nothing frozen */
    CHECK_FAILS(hg_memory_required(&c, &o, &plan), HG_ERR_INVALID, "base_precision");
    o.base_precision = (hg_precision)7;
    CHECK_FAILS(hg_memory_required(&c, &o, &plan), HG_ERR_INVALID, "base_precision");
    o.precision = o.base_precision = HG_PRECISION_FP32;
    hg_config g = small("odd"); /* GELU: its first MLP layer is whole */
    o.lora = every_module(&g, 4);
    o.lora.split[HG_LORA_MLP_IN] = 2, o.lora.targets[HG_LORA_MLP_IN] = 3;
    CHECK_FAILS(hg_memory_required(&g, &o, &plan), HG_ERR_INVALID, "lora.split");
}

int main(void) {
    for (int bf16 = 0; bf16 < 2; bf16++) {
        op_case(bf16, 0.0f);
        op_case(bf16, 0.3f);
    }
    identity_at_init("odd");
    identity_at_init("llama-tiny");
    adapter_gradients("odd", 0);
    adapter_gradients("llama-tiny", 1);
    frozen();
    base_bf16("llama-tiny", NULL);
    base_bf16("odd", "h.*.mlp.*,wte.weight");
    {
        hg_config c = small("llama-tiny");
        bf16_gradients("llama-tiny", every_module(&c, 4), NULL);
        bf16_gradients("odd", (hg_lora){0}, "h.0.*,wpe.weight");
    }
    bad_settings();
    CHECK_DONE();
}
