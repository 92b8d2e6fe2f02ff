/* The extension API (handgrad_ext.h): hg_gradcheck passes a correct op and catches
 * planted bugs (a wrong sign, a missing accumulation, an off-by-one loop bound, an
 * output left unwritten), in double and in float; it refuses a bad definition by
 * field. hg_override_gelu puts a user's kernel into a model's step, only on the device
 * named; hg_override_attention a plain attention backward, in a grouped-query model;
 * hg_override_norm plain LayerNorm and RMSNorm kernels (dropout on the residual form
 * included) and hg_override_matmul plain linear layers, in GPT-2 and Llama-style models.
 * An override's failing status stops the step, naming the op and block. Model hooks put
 * overrides into every model created, and a failing one fails the creation. hg_bench_op
 * counts exactly the allocations of the calls it times. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "handgrad_ext.h"

/* y (M) = W (M, K) x (K) + b (M); bug selects a planted mistake. */
enum { M = 5, K = 7 };
enum bug { NONE, SIGN, OVERWRITE, OFF_BY_ONE, UNWRITTEN };
static enum bug bug;

static hg_status lin_forward(void *ctx, const float *const *in, float *const *out) {
    (void)ctx;
    for (int i = 0; i < M - (bug == UNWRITTEN); i++) {
        double s = in[2][i];
        for (int k = 0; k < K; k++) s += (double)in[1][i * K + k] * in[0][k];
        out[0][i] = (float)s;
    }
    return HG_OK;
}

static hg_status lin_forward_f64(void *ctx, const double *const *in, double *const *out) {
    (void)ctx;
    for (int i = 0; i < M; i++) {
        double s = in[2][i];
        for (int k = 0; k < K; k++) s += in[1][i * K + k] * in[0][k];
        out[0][i] = s;
    }
    return HG_OK;
}

/* dx = W^T dy (written); dW += dy x^T, db += dy (accumulated) */
static hg_status lin_backward(void *ctx, const float *const *in, const float *const *out, const float *const *dout,
                              float *const *din) {
    (void)ctx, (void)out;
    const float *x = in[0], *W = in[1], *dy = dout[0];
    for (int k = 0; k < K; k++) {
        double s = 0;
        for (int i = 0; i < M; i++) s += (double)W[i * K + k] * dy[i];
        din[0][k] = (float)(bug == SIGN && k == 3 ? -s : s);
    }
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K - (bug == OFF_BY_ONE); k++) {
            if (bug == OVERWRITE) din[1][i * K + k] = dy[i] * x[k];
            else din[1][i * K + k] += dy[i] * x[k];
        }
    for (int i = 0; i < M; i++) din[2][i] += dy[i];
    return HG_OK;
}

static hg_gradcheck_report check(enum bug b, int f64) {
    bug = b;
    hg_op_def op = {.name = "linear", .n_in = 3, .n_out = 1, .in_name = {"x", "W", "b"}, .out_name = {"y"},
                    .in_size = {K, M * K, M}, .out_size = {M}, .params = 6u, .forward = lin_forward,
                    .backward = lin_backward, .forward_f64 = f64 ? lin_forward_f64 : NULL};
    hg_gradcheck_report r;
    CHECK_OK(hg_gradcheck(&op, NULL, &r));
    return r;
}

static void gradcheck(void) {
    for (int f64 = 0; f64 < 2; f64++) {
        hg_gradcheck_report r = check(NONE, f64);
        CHECK(r.ok && r.accumulates[1] && r.accumulates[2] && !r.accumulates[0]);
        CHECK(r.in[0].err < (f64 ? 1e-5 : 1e-3) && r.in[1].index >= 0 && r.unwritten_out[0] == -1);
        if (!r.ok) fprintf(stderr, "correct op, f64 %d: %s\n", f64, r.summary);

        r = check(SIGN, f64);
        CHECK(!r.ok && r.in[0].index == 3 && strstr(r.summary, "dx[3]"));
        r = check(OVERWRITE, f64);
        CHECK(!r.ok && !r.accumulates[1] && strstr(r.summary, "overwrote dW"));
        r = check(OFF_BY_ONE, f64);
        CHECK(!r.ok && r.in[1].index % K == K - 1 && strstr(r.summary, "dW["));
        r = check(UNWRITTEN, f64);
        CHECK(!r.ok && r.unwritten_out[0] == M - 1 && strstr(r.summary, "left y[4] unwritten"));
    }
    /* definitions refused by field */
    bug = NONE;
    hg_op_def op = {.name = "linear", .n_in = 3, .n_out = 1, .in_size = {K, M * K, 0}, .out_size = {M},
                    .forward = lin_forward, .backward = lin_backward};
    hg_gradcheck_report r;
    CHECK(hg_gradcheck(&op, NULL, &r) == HG_ERR_INVALID && strstr(hg_last_error(), "in_size[2]"));
    op.in_size[2] = M, op.n_out = 0;
    CHECK(hg_gradcheck(&op, NULL, &r) == HG_ERR_INVALID && strstr(hg_last_error(), "n_out"));
    op.n_out = 1, op.params = 1u << 5;
    CHECK(hg_gradcheck(&op, NULL, &r) == HG_ERR_INVALID && strstr(hg_last_error(), "params"));
}

/* ---- an override in a model: counted calls, and gradients that follow the kernel ---- */

static int calls;
static float factor;

static void scaled_gelu_backward(hg_backend *be, float *dinp, const float *inp, const float *dout, size_t n) {
    (void)be;
    calls++;
    for (size_t i = 0; i < n; i++) {
        const float x = inp[i], u = 0.7978845608028654f * (x + 0.044715f * x * x * x), th = tanhf(u);
        const float d = 0.5f * (1 + th) + 0.5f * x * (1 - th * th) * 0.7978845608028654f * (1 + 3 * 0.044715f * x * x);
        dinp[i] = factor * d * dout[i];
    }
}

/* The gradient of parameter `what` of the last block ("mlp.c_fc.weight") after one
 * forward_backward. */
static void last_block_grad(hg_model *m, const int32_t *tok, const char *what, float *out) {
    float loss;
    hg_param_info info;
    char name[64];
    snprintf(name, sizeof name, "h.%d.%s", hg_model_config(m)->n_layer - 1, what);
    CHECK_OK(hg_zero_grad(m));
    CHECK_OK(hg_forward_backward(m, tok, tok + 1, 2, 16, 1.0f, &loss));
    for (int i = 0; i < hg_param_count(m); i++) {
        CHECK_OK(hg_param_at(m, i, &info));
        if (!strcmp(info.name, name)) CHECK_OK(hg_param_read(m, i, HG_PARAM_GRAD, out));
    }
}

/* An override case: install(m, k) puts the kernels into model m with factor k (k = 0:
 * leave the built-in). The backward kernels multiply by factor either all they write
 * (GELU, attention) or only the parameter gradients (norms, linear layers). Either way
 * the last block's gradient of `what` must be the built-in's, then twice it: what reaches
 * the last block from the classifier is unchanged. The overridden kernels must be called
 * per_block * n_layer + extra times a forward_backward. */
typedef struct override_case {
    const char *preset, *what;
    void (*install)(hg_model *m, int k);
    int per_block, extra;
    float dropout; /* the model's cfg.dropout */
} override_case;

static void override_follows(const override_case *oc) {
    hg_config cfg;
    CHECK_OK(hg_config_preset(oc->preset, &cfg));
    cfg.dropout = oc->dropout;
    hg_options opt = hg_options_default();
    opt.batch = 2, opt.seq_len = 16, opt.seed = 3, opt.threads = 1;
    int32_t tok[2 * 16 + 1];
    for (int i = 0; i < 33; i++) tok[i] = (i * 37 + 5) % cfg.vocab_size;
    float *g[3] = {NULL, NULL, NULL};
    size_t n = 0;
    for (int k = 0; k < 3; k++) {
        hg_model *m;
        CHECK_OK(hg_model_create(&m, &cfg, &opt));
        char name[64];
        hg_param_info info;
        snprintf(name, sizeof name, "h.%d.%s", cfg.n_layer - 1, oc->what);
        CHECK_OK(hg_param_find(m, name, &info));
        n = (size_t)info.numel;
        if (!(g[k] = malloc(n * sizeof(float)))) return;
        oc->install(m, k);
        calls = 0, factor = (float)k;
        last_block_grad(m, tok, oc->what, g[k]);
        CHECK(calls == (k ? oc->per_block * cfg.n_layer + oc->extra : 0));
        hg_model_free(m);
    }
    double d1 = 0, d2 = 0, big = 0;
    for (size_t i = 0; i < n; i++) {
        d1 = fmax(d1, fabs(g[1][i] - g[0][i]));
        d2 = fmax(d2, fabs(g[2][i] - 2 * g[0][i]));
        big = fmax(big, fabs(g[0][i]));
    }
    printf("an override in %s%s: the last block's %s gradient is the built-in's to %.2e of its largest\n",
           oc->preset, oc->dropout > 0 ? " with dropout" : "", oc->what, d1 / big);
    CHECK(big > 0 && d1 <= 1e-4 * big && d2 <= 1e-4 * big);
    for (int k = 0; k < 3; k++) free(g[k]);
}

static void install_gelu(hg_model *m, int k) {
    /* an override for another device leaves the CPU model alone */
    CHECK_OK(hg_override_gelu(m, HG_DEVICE_CUDA, NULL, scaled_gelu_backward));
    if (k) CHECK_OK(hg_override_gelu(m, HG_DEVICE_CPU, NULL, scaled_gelu_backward));
}

/* ---- an attention backward of one's own ---- */

/* A causal attention backward written plainly (src/ops/attention.h's contract), every
 * score recomputed from q, k and the saved lse; factor scales the result. */
static void plain_attention(float *dqkv, const float *dout, const float *qkv, const float *out,
                            const float *lse, const hg_attention_shape *s) {
    const int B = s->B, T = s->T, NH = s->NH, hs = s->hs, NKV = s->NKV ? s->NKV : s->NH;
    const int W = (NH + 2 * NKV) * hs, C = NH * hs;
    const double scale = 1.0 / sqrt((double)hs);
    memset(dqkv, 0, sizeof(float) * (size_t)B * T * W);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int g = h / (NH / NKV), qo = h * hs, ko = NH * hs + g * hs, vo = (NH + NKV) * hs + g * hs;
            for (int i = 0; i < T; i++) {
                const float *qi = qkv + ((size_t)b * T + i) * W + qo;
                const float *doi = dout + ((size_t)b * T + i) * C + h * hs, *oi = out + ((size_t)b * T + i) * C + h * hs;
                double D = 0;
                for (int d = 0; d < hs; d++) D += (double)doi[d] * oi[d];
                const double l = lse[((size_t)b * NH + h) * T + i];
                for (int j = 0; j <= (s->causal ? i : T - 1); j++) {
                    const float *kj = qkv + ((size_t)b * T + j) * W + ko, *vj = qkv + ((size_t)b * T + j) * W + vo;
                    double sc = 0, dp = 0;
                    for (int d = 0; d < hs; d++) sc += (double)qi[d] * kj[d], dp += (double)doi[d] * vj[d];
                    const double p = exp(sc * scale - l), ds = p * (dp - D) * scale * factor;
                    float *dq = dqkv + ((size_t)b * T + i) * W + qo, *dk = dqkv + ((size_t)b * T + j) * W + ko;
                    float *dv = dqkv + ((size_t)b * T + j) * W + vo;
                    for (int d = 0; d < hs; d++) {
                        dq[d] += (float)(ds * kj[d]);
                        dk[d] += (float)(ds * qi[d]);
                        dv[d] += (float)(p * factor * doi[d]);
                    }
                }
            }
        }
}

static hg_status plain_attention_backward(hg_backend *be, float *dqkv, const float *dout, const float *qkv,
                                          const float *out, const float *lse, const hg_attention_shape *s,
                                          void *scratch) {
    (void)be, (void)scratch;
    calls++;
    plain_attention(dqkv, dout, qkv, out, lse, s);
    return HG_OK;
}

static void install_attention(hg_model *m, int k) {
    CHECK(hg_attention_scratch_bytes(m) > 0);
    if (k) CHECK_OK(hg_override_attention(m, HG_DEVICE_CPU, NULL, plain_attention_backward));
}

/* ---- norms and linear layers of one's own ---- */

/* LayerNorm or RMSNorm of one row (handgrad_ext.h's contract), in double. */
static void plain_norm_row(float *out, float *mean, float *rstd, const float *x, const float *w, const float *b, int C,
                           const hg_norm_spec *ns) {
    double mu = 0, var = 0;
    if (!ns->rms) {
        for (int i = 0; i < C; i++) mu += x[i];
        mu /= C;
    }
    for (int i = 0; i < C; i++) var += (x[i] - mu) * (x[i] - mu);
    const double r = 1.0 / sqrt(var / C + ns->eps);
    for (int i = 0; i < C; i++) out[i] = (float)((x[i] - mu) * r * (w ? w[i] : 1.0) + (b ? b[i] : 0.0));
    if (mean) *mean = (float)mu;
    *rstd = (float)r;
}

static void plain_norm_forward(hg_backend *be, float *out, float *mean, float *rstd, const float *inp, const float *w,
                               const float *b, int N, int C, const hg_norm_spec *ns) {
    (void)be;
    calls++;
    for (int n = 0; n < N; n++)
        plain_norm_row(out + (size_t)n * C, ns->rms ? NULL : mean + n, rstd + n, inp + (size_t)n * C, w, b, C, ns);
}

static void plain_residual_norm_forward(hg_backend *be, float *res_out, float *out, float *mean, float *rstd,
                                        const float *res_in, const float *delta, const float *w, const float *b,
                                        int N, int C, const hg_dropout *drop, const hg_norm_spec *ns) {
    (void)be;
    calls++;
    for (size_t i = 0; i < (size_t)N * C; i++) res_out[i] = res_in[i] + delta[i] * hg_dropout_factor(drop, i);
    for (int n = 0; n < N; n++)
        plain_norm_row(out + (size_t)n * C, ns->rms ? NULL : mean + n, rstd + n, res_out + (size_t)n * C, w, b, C, ns);
}

/* dinp += the exact gradient; dw, db += factor times theirs. */
static void plain_norm_backward(hg_backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                const float *w, const float *mean, const float *rstd, int N, int C, float *scratch,
                                const hg_norm_spec *ns) {
    (void)be, (void)scratch;
    calls++;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
        const double mu = ns->rms ? 0.0 : mean[n], r = rstd[n];
        double sg = 0, sgx = 0; /* means of dy and of dy * xhat, dy = g * w */
        for (int i = 0; i < C; i++) {
            const double dy = g[i] * (w ? w[i] : 1.0);
            sg += dy, sgx += dy * (x[i] - mu) * r;
        }
        sg = ns->rms ? 0.0 : sg / C, sgx /= C;
        for (int i = 0; i < C; i++) {
            const double xhat = (x[i] - mu) * r, dy = g[i] * (w ? w[i] : 1.0);
            dinp[(size_t)n * C + i] += (float)(r * (dy - sg - xhat * sgx));
            if (dw) dw[i] += (float)(factor * g[i] * xhat);
            if (db) db[i] += (float)(factor * g[i]);
        }
    }
}

static void install_norm(hg_model *m, int k) {
    CHECK(hg_norm_scratch_bytes(m) > 0);
    CHECK_OK(hg_override_norm(m, HG_DEVICE_CUDA, NULL, NULL, plain_norm_backward));
    if (k)
        CHECK_OK(hg_override_norm(m, HG_DEVICE_CPU, plain_norm_forward, plain_residual_norm_forward,
                                  plain_norm_backward));
}

/* out (rows, cols) = inp (rows, inner) @ w (inner, cols) + bias, in double. */
static hg_status plain_matmul_forward(hg_backend *be, float *out, const float *inp, const float *w, const float *bias,
                                      int rows, int inner, int cols) {
    (void)be;
    calls++;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            double acc = bias ? bias[j] : 0.0;
            for (int p = 0; p < inner; p++) acc += (double)inp[(size_t)i * inner + p] * w[(size_t)p * cols + j];
            out[(size_t)i * cols + j] = (float)acc;
        }
    return HG_OK;
}

/* dinp = dout w^T exactly; dw, dbias += factor times theirs. */
static hg_status plain_matmul_backward(hg_backend *be, float *dinp, float *dw, float *dbias, const float *dout,
                                       const float *inp, const float *w, int rows, int inner, int cols) {
    (void)be;
    calls++;
    for (int i = 0; i < rows; i++)
        for (int p = 0; p < inner; p++) {
            double acc = 0;
            for (int j = 0; j < cols; j++) acc += (double)dout[(size_t)i * cols + j] * w[(size_t)p * cols + j];
            dinp[(size_t)i * inner + p] = (float)acc;
        }
    for (int p = 0; p < inner; p++)
        for (int j = 0; j < cols; j++) {
            double acc = 0;
            for (int i = 0; i < rows; i++) acc += (double)inp[(size_t)i * inner + p] * dout[(size_t)i * cols + j];
            dw[(size_t)p * cols + j] += (float)(factor * acc);
        }
    for (int j = 0; dbias && j < cols; j++) {
        double acc = 0;
        for (int i = 0; i < rows; i++) acc += dout[(size_t)i * cols + j];
        dbias[j] += (float)(factor * acc);
    }
    return HG_OK;
}

static void install_matmul(hg_model *m, int k) {
    if (k) CHECK_OK(hg_override_matmul(m, HG_DEVICE_CPU, plain_matmul_forward, plain_matmul_backward));
}

/* A kernel's failing status stops the step, and the message names the op and block. */
static hg_status refusing_matmul_backward(hg_backend *be, float *dinp, float *dw, float *dbias, const float *dout,
                                          const float *inp, const float *w, int rows, int inner, int cols) {
    (void)be, (void)dinp, (void)dw, (void)dbias, (void)dout, (void)inp, (void)w, (void)rows, (void)inner, (void)cols;
    return HG_ERR_UNSUPPORTED;
}

static void failing_override(void) {
    hg_config cfg;
    CHECK_OK(hg_config_preset("tiny", &cfg));
    hg_options opt = hg_options_default();
    opt.batch = 1, opt.seq_len = 8, opt.threads = 1;
    hg_model *m;
    CHECK_OK(hg_model_create(&m, &cfg, &opt));
    CHECK(hg_override_matmul(NULL, HG_DEVICE_CPU, NULL, NULL) == HG_ERR_INVALID && strstr(hg_last_error(), "NULL"));
    CHECK_OK(hg_override_matmul(m, HG_DEVICE_CPU, NULL, refusing_matmul_backward));
    int32_t tok[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    float loss;
    char want[128];
    snprintf(want, sizeof want, "matmul mlp.c_proj backward (block %d) returned 'unsupported'", cfg.n_layer - 1);
    CHECK(hg_forward_backward(m, tok, tok + 1, 1, 8, 1.0f, &loss) == HG_ERR_UNSUPPORTED);
    CHECK(strstr(hg_last_error(), want));
    printf("a failing override: %s\n", hg_last_error());
    hg_model_free(m);
}

/* ---- model hooks: overrides for every model of the process ---- */

static hg_status matmul_hook(hg_model *m, void *ctx) {
    (*(int *)ctx)++;
    return hg_override_matmul(m, HG_DEVICE_CPU, plain_matmul_forward, NULL);
}

static hg_status refusing_hook(hg_model *m, void *ctx) {
    (void)m, (void)ctx;
    return HG_ERR_UNSUPPORTED;
}

/* Creates a tiny model and runs one forward_backward; returns the overridden calls. */
static int hooked_calls(hg_status want) {
    hg_config cfg;
    CHECK_OK(hg_config_preset("tiny", &cfg));
    hg_options opt = hg_options_default();
    opt.batch = 1, opt.seq_len = 8, opt.threads = 1;
    hg_model *m = (hg_model *)&cfg; /* not NULL: a failed creation must set it so */
    CHECK(hg_model_create(&m, &cfg, &opt) == want);
    if (want != HG_OK) {
        CHECK(m == NULL);
        return -1;
    }
    int32_t tok[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    float loss;
    calls = 0;
    CHECK_OK(hg_forward_backward(m, tok, tok + 1, 1, 8, 1.0f, &loss));
    hg_model_free(m);
    return calls;
}

static void model_hooks(void) {
    int ran = 0;
    CHECK(hg_add_model_hook(NULL, matmul_hook, NULL) == HG_ERR_INVALID && strstr(hg_last_error(), "name"));
    CHECK(hg_add_model_hook("", matmul_hook, NULL) == HG_ERR_INVALID && strstr(hg_last_error(), "name"));
    CHECK(hg_add_model_hook("0123456789012345678901234567890123", matmul_hook, NULL) == HG_ERR_INVALID);
    CHECK(hg_add_model_hook("plain", NULL, NULL) == HG_ERR_INVALID && strstr(hg_last_error(), "hook is NULL"));
    CHECK_OK(hg_add_model_hook("plain", matmul_hook, &ran));
    CHECK(hg_add_model_hook("plain", matmul_hook, &ran) == HG_ERR_INVALID && strstr(hg_last_error(), "exists"));
    /* the 4 linear layers' forwards of each of the 2 blocks */
    CHECK(hooked_calls(HG_OK) == 8 && ran == 1);
    CHECK_OK(hg_add_model_hook("refuse", refusing_hook, NULL));
    CHECK(hooked_calls(HG_ERR_UNSUPPORTED) == -1 && ran == 2);
    CHECK(strstr(hg_last_error(), "model hook 'refuse' returned 'unsupported'"));
    char name[8][16];
    int added = 0;
    for (int i = 0; i < 8; i++) {
        snprintf(name[i], sizeof name[i], "h%d", i);
        added += hg_add_model_hook(name[i], refusing_hook, NULL) == HG_OK;
    }
    CHECK(added == 6 && strstr(hg_last_error(), "at most 8"));
    for (int i = 0; i < added; i++) CHECK_OK(hg_remove_model_hook(name[i]));
    CHECK_OK(hg_remove_model_hook("refuse"));
    CHECK_OK(hg_remove_model_hook("plain"));
    CHECK(hg_remove_model_hook("plain") == HG_ERR_INVALID && strstr(hg_last_error(), "no hook named 'plain'"));
    CHECK(hooked_calls(HG_OK) == 0 && ran == 2);
}

/* ---- hg_bench_op: the counts are the calls' own ---- */

static hg_status allocating(void *ctx) {
    void *volatile p = malloc(24 + (size_t)(*(int *)ctx)++ % 8);
    free(p);
    return HG_OK;
}

static hg_status quiet(void *ctx) {
    (*(volatile int *)ctx)++;
    return HG_OK;
}

static void bench(void) {
    int k = 0;
    hg_bench_result a, q;
    CHECK_OK(hg_bench_op(allocating, &k, 5, &a));
    CHECK_OK(hg_bench_op(quiet, &k, 5, &q));
    CHECK(a.runs == 5 && a.calls_per_run >= 1 && a.min_s > 0 && a.min_s <= a.median_s && a.median_s <= a.max_s);
#ifdef HG_ALLOC_COUNTED /* linked with the counter (not in sanitizer builds) */
    CHECK(a.counted && a.allocs == a.runs * a.calls_per_run && a.onednn_allocs == 0);
    CHECK(q.counted && q.allocs == 0);
#else
    CHECK(!a.counted && a.allocs == -1 && !q.counted);
#endif
    CHECK(hg_bench_op(quiet, &k, 0, &q) == HG_ERR_INVALID && strstr(hg_last_error(), "runs"));
}

int main(void) {
    bench();
    gradcheck();
    /* GELU in GPT-2's MLP; attention in a grouped-query model */
    static const override_case cases[] = {
        {"tiny", "mlp.c_fc.weight", install_gelu, 1, 0, 0.0f},
        {"llama-tiny", "attn.c_attn.weight", install_attention, 1, 0, 0.0f},
        /* forward, residual form and backward: 2 norms a block and the final one, each way */
        {"tiny", "ln_2.weight", install_norm, 4, 2, 0.1f},
        {"llama-tiny", "ln_1.weight", install_norm, 4, 2, 0.0f},
        /* q|k|v, attention output, MLP in and out, forward and backward */
        {"tiny", "attn.c_attn.weight", install_matmul, 8, 0, 0.0f},
        {"llama-tiny", "mlp.c_fc.weight", install_matmul, 8, 0, 0.1f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) override_follows(&cases[i]);
    failing_override();
    model_hooks();
    CHECK_DONE();
}
