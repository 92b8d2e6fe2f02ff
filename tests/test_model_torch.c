/* The whole model against PyTorch: logits, loss, every parameter gradient and a 10-step
 * AdamW trajectory, from fixtures computed in float64: GPT-2 by tools/gen_gpt2_fixture.py,
 * and transformers' LlamaForCausalLM (grouped-query attention, untied),
 * Qwen2ForCausalLM (q/k/v bias, tied), Qwen3ForCausalLM (q/k norm, head_dim above
 * d_model/n_head, tied), GemmaForCausalLM (GeGLU, embed_scale sqrt(d_model), (1 + w)
 * norms, multi-query, head_dim 48, tied), Gemma2ForCausalLM (the sandwich block with
 * post norms, logit_softcap 0.75, tied), Phi3ForCausalLM (rotary_dim 16 of head 32,
 * untied), Olmo2ForCausalLM (the postnorm block, q/k norms over their whole width,
 * grouped-query, untied) and PhiForCausalLM (Phi-2's parallel block with LayerNorm,
 * biases everywhere including lm_head, rotary_dim 12 of head 32, untied) by
 * tools/gen_llama_fixture.py. The model's config comes from the fixture's metadata
 * through hg_config_set, field by field.
 *
 * Then every fixture again with the CPU in bf16 (bf16
 * weights and activations, fp32 masters and gradients), against the same float64 reference:
 *   loss, and the loss of each of the ten AdamW steps   1e-2 relative
 *   gradients            per tensor: cosine similarity with the reference >= 0.999
 *                        (the key slice of c_attn.bias left out as below)
 *   the ten losses       at most twice as far from the reference as PyTorch's bf16
 *                        autocast from the same initialisation (worst step against worst
 *                        step, plus 1e-5 of the loss), from tests/fixtures/autocast.json
 *                        (tools/gen_autocast_reference.py); measured 2026-11-27 on the
 *                        portable path: 0.96-1.37 times autocast's.
 * and with AdamW's moments in bf16 (hg_options.optim_state), the same ten steps:
 *   in fp32 compute      at most 0.25 times autocast's distance: the moments' own cost
 *                        (measured 2026-11-28: 0.01-0.06 times; rounding them by
 *                        truncation instead of stochastically gives 0.46-4.77 times)
 *   in bf16 compute      at most 2.5 times: bf16 compute's own distance (fp32 moments)
 *                        already reaches 2.0 times in the sanitizer build, and bf16
 *                        moments move each rounding of it (release 0.29-1.48 times,
 *                        the sanitizer build 0.25-2.15).
 *
 * Tolerances (fp32 engine against a float64 reference; the fixture's own float32 PyTorch
 * run agrees with float64 to ~5e-7, see its self-check):
 *   loss                 1e-5 relative
 *   logits               2e-5 x max|logit| absolute
 *   gradients            per tensor: relative L2 error 1e-4, and max |error| 1e-4 x max|g|
 *   trajectory loss[k]   1e-4 relative (errors compound over steps)
 *   grad norm[k]         1e-4 relative
 *   final parameters     relative L2 error of the 10-step update (final - initial) 1e-3
 *                        (observed <= 1.6e-4). Without rotary embeddings the key slice of
 *                        c_attn.bias is left out: a key bias then adds a constant to a
 *                        whole row of scores, which softmax ignores, so its true gradient
 *                        is exactly 0 and AdamW's m/sqrt(v) turns rounding noise (fp32
 *                        here, fp64 there) into +-lr steps. Rotated, the bias varies with
 *                        the key's position and its gradient is not 0; with a partial
 *                        rotary embedding (rotary_dim < head_dim, Phi-2) each key head's
 *                        unrotated dims are such constants again and are left out too
 *                        (kept in, phi2_parallel's c_attn.bias updates differ by 8e-4). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/bf16.h"
#include "handgrad.h"
#include "io/safetensors.h"

static double *read_f64(hg_st_file *f, const char *name, int64_t n) {
    const hg_st_tensor *t = hg_st_find(f, name);
    double *out = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (!t || !out || hg_st_read_f64(f, t, out, n) != HG_OK) {
        fprintf(stderr, "fixture: cannot read '%s' (%lld elements): %s\n", name, (long long)n, hg_last_error());
        exit(1);
    }
    return out;
}

/* A number from a metadata JSON object (config or adamw); a fixture without it is broken. */
static double meta_num(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(v)) {
        fprintf(stderr, "fixture: metadata has no number '%s'\n", key);
        exit(1);
    }
    return v->valuedouble;
}

/* Relative L2 error and max error of got against want, over n elements. */
static void compare(const char *what, const float *got, const double *want, const double *base, int64_t n,
                    double rel_l2_tol, double max_tol) {
    double err2 = 0, ref2 = 0, maxerr = 0, maxref = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = got[i] - (base ? base[i] : 0), w = want[i] - (base ? base[i] : 0);
        err2 += (g - w) * (g - w);
        ref2 += w * w;
        maxerr = fmax(maxerr, fabs(g - w));
        maxref = fmax(maxref, fabs(w));
    }
    double rel = ref2 > 0 ? sqrt(err2 / ref2) : sqrt(err2);
    if (getenv("HG_TEST_VERBOSE")) printf("  %-48s rel L2 %.2e  max %.2e of %.2e\n", what, rel, maxerr, maxref);
    if (!(rel <= rel_l2_tol) || (max_tol > 0 && !(maxerr <= max_tol * maxref))) {
        fprintf(stderr, "%s: relative L2 error %.3g (tol %.1g), max error %.3g of max %.3g\n", what, rel, rel_l2_tol,
                maxerr, maxref);
        check_failures++;
    }
}

/* The fixture's config: every key of its metadata object is a config field. */
static void read_config(hg_st_file *f, hg_config *cfg) {
    cJSON *c = cJSON_Parse(hg_st_metadata(f, "config"));
    CHECK(c != NULL);
    memset(cfg, 0, sizeof *cfg);
    const cJSON *it;
    cJSON_ArrayForEach(it, c) {
        char v[64];
        if (cJSON_IsNumber(it)) snprintf(v, sizeof v, "%.17g", it->valuedouble);
        else if (cJSON_IsBool(it)) snprintf(v, sizeof v, "%s", cJSON_IsTrue(it) ? "true" : "false");
        else snprintf(v, sizeof v, "%s", cJSON_IsString(it) ? it->valuestring : "?");
        if (hg_config_set(cfg, it->string, v) != HG_OK) {
            fprintf(stderr, "fixture: %s\n", hg_last_error());
            exit(1);
        }
    }
    cJSON_Delete(c);
}

static hg_model *load_model(hg_st_file *f, hg_config *cfg, int *B, int *T, hg_precision precision, hg_precision state,
                            hg_precision grads) {
    read_config(f, cfg);
    *B = atoi(hg_st_metadata(f, "batch"));
    *T = atoi(hg_st_metadata(f, "seq_len"));
    hg_options o = hg_options_default();
    o.batch = *B;
    o.seq_len = *T;
    o.threads = 2;
    o.precision = precision;
    o.optim_state = state;
    o.grad_precision = grads;
    hg_model *m = NULL;
    CHECK_OK(hg_model_create(&m, cfg, &o));
    if (!m) exit(1);
    int in_file = 0;
    for (int i = 0; i < hg_st_count(f); i++) in_file += !strncmp(hg_st_at(f, i)->name, "param.", 6);
    CHECK(in_file == hg_param_count(m)); /* no tensor of the reference is left unmapped */
    if (hg_st_find(f, "positions")) { /* packed documents: every forward of the model has them */
        const int N = *B * *T;
        double *pd = read_f64(f, "positions", N);
        int32_t *pos = malloc(sizeof(int32_t) * (size_t)N);
        for (int i = 0; i < N; i++) pos[i] = (int32_t)pd[i];
        CHECK_OK(hg_set_positions(m, pos, *B, *T));
        free(pd), free(pos);
    }
    for (int i = 0; i < hg_param_count(m); i++) {
        hg_param_info p;
        CHECK_OK(hg_param_at(m, i, &p));
        char name[160];
        snprintf(name, sizeof name, "param.%s", p.name);
        const hg_st_tensor *t = hg_st_find(f, name);
        CHECK(t != NULL);
        float *host = malloc(sizeof(float) * (size_t)p.numel);
        if (t && host && hg_st_read_f32(f, t, host, p.numel) == HG_OK) CHECK_OK(hg_param_write(m, i, HG_PARAM_DATA, host));
        else CHECK(!"fixture parameter read");
        free(host);
    }
    return m;
}

/* The fixture's batch as int32 ids (the caller frees both). */
static void read_batch(hg_st_file *f, int N, int32_t **tok, int32_t **tgt) {
    double *tokd = read_f64(f, "tokens", N), *tgtd = read_f64(f, "targets", N);
    *tok = malloc(sizeof(int32_t) * N), *tgt = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) (*tok)[i] = (int32_t)tokd[i], (*tgt)[i] = (int32_t)tgtd[i];
    free(tokd), free(tgtd);
}

/* The fixture's AdamW settings (its metadata's "adamw" object). */
static hg_adamw read_adamw(hg_st_file *f) {
    cJSON *aj = cJSON_Parse(hg_st_metadata(f, "adamw"));
    CHECK(aj != NULL);
    hg_adamw a = {(float)meta_num(aj, "lr"), (float)meta_num(aj, "beta1"), (float)meta_num(aj, "beta2"),
                  (float)meta_num(aj, "eps"), (float)meta_num(aj, "weight_decay"), (float)meta_num(aj, "grad_clip")};
    cJSON_Delete(aj);
    return a;
}

/* Whether element j of parameter p is a key entry of a c_attn.bias (q | k | v) that no
 * rotation reaches, whose true gradient is 0 (see the top): the whole key slice without
 * rotary embeddings, the dims from rotary_dim on of each key head with a partial one. */
static int unrotated_key_bias(const hg_config *cfg, const hg_param_info *p, int64_t j) {
    if (!strstr(p->name, "attn.c_attn.bias")) return 0;
    const int64_t NH = cfg->n_head, NKV = cfg->n_kv_head ? cfg->n_kv_head : cfg->n_head;
    const int64_t hs = p->numel / (NH + 2 * NKV);
    const int64_t rot = cfg->position != HG_POS_ROPE ? 0 : cfg->rotary_dim ? cfg->rotary_dim : hs;
    return j >= NH * hs && j < (NH + NKV) * hs && (j - NH * hs) % hs >= rot;
}

static void check_fixture(const char *path) {
    printf("%s\n", path);
    hg_st_file *f;
    CHECK_OK(hg_st_open(&f, path));
    if (!f) return;
    hg_config cfg;
    int B, T;
    hg_model *m = load_model(f, &cfg, &B, &T, HG_PRECISION_FP32, HG_PRECISION_FP32, HG_PRECISION_FP32);
    const int N = B * T, V = cfg.vocab_size;
    int32_t *tok, *tgt;
    read_batch(f, N, &tok, &tgt);
    double *want_logits = read_f64(f, "logits", (int64_t)N * V), *want_loss = read_f64(f, "loss", 1);

    /* forward: loss and logits (logits poisoned first so an unwritten element shows) */
    float *logits = malloc(sizeof(float) * (size_t)N * V), loss = NAN;
    for (int64_t i = 0; i < (int64_t)N * V; i++) logits[i] = NAN;
    CHECK_OK(hg_forward(m, tok, tgt, B, T, &loss, logits));
    CHECK_CLOSE(loss, want_loss[0], 1e-5, 0);
    compare("logits", logits, want_logits, NULL, (int64_t)N * V, 1e-5, 2e-5);

    /* backward, both paths: standalone hg_backward, then the fused hg_forward_backward */
    for (int path = 0; path < 2; path++) {
        CHECK_OK(hg_zero_grad(m));
        if (path == 0) {
            CHECK_OK(hg_backward(m, 1.0f));
        } else {
            float l2 = NAN;
            CHECK_OK(hg_forward_backward(m, tok, tgt, B, T, 1.0f, &l2));
            CHECK_CLOSE(l2, want_loss[0], 1e-5, 0);
        }
        for (int i = 0; i < hg_param_count(m); i++) {
            hg_param_info p;
            CHECK_OK(hg_param_at(m, i, &p));
            char name[160], what[200];
            snprintf(name, sizeof name, "grad.%s", p.name);
            snprintf(what, sizeof what, "%s (%s)", name, path ? "forward_backward" : "backward");
            double *want = read_f64(f, name, p.numel);
            compare(what, p.grad, want, NULL, p.numel, 1e-4, 1e-4);
            free(want);
        }
    }

    /* ten AdamW steps on the same batch */
    hg_adamw a = read_adamw(f);
    double *losses = read_f64(f, "adamw.losses", 10), *norms = read_f64(f, "adamw.grad_norms", 10);
    hg_model_free(m);
    m = load_model(f, &cfg, &B, &T, HG_PRECISION_FP32, HG_PRECISION_FP32, HG_PRECISION_FP32);
    for (int k = 0; k < 10; k++) {
        float l = NAN, gn = NAN;
        CHECK_OK(hg_zero_grad(m));
        CHECK_OK(hg_forward_backward(m, tok, tgt, B, T, 1.0f, &l));
        CHECK_OK(hg_optimizer_step(m, &a, &gn));
        CHECK_CLOSE(l, losses[k], 1e-4, 0);
        CHECK_CLOSE(gn, norms[k], 1e-4, 0);
    }
    CHECK(hg_optimizer_steps(m) == 10);
    for (int i = 0; i < hg_param_count(m); i++) {
        hg_param_info p;
        CHECK_OK(hg_param_at(m, i, &p));
        char name[160];
        snprintf(name, sizeof name, "final.%s", p.name);
        double *want = read_f64(f, name, p.numel);
        snprintf(name, sizeof name, "param.%s", p.name);
        double *init = read_f64(f, name, p.numel);
        int64_t kept = 0;
        for (int64_t j = 0; j < p.numel; j++) kept += !unrotated_key_bias(&cfg, &p, j);
        if (kept < p.numel) { /* q | k | v: compare the rest only */
            float *g = malloc(sizeof(float) * (size_t)kept);
            double *w = malloc(sizeof(double) * (size_t)kept), *b = malloc(sizeof(double) * (size_t)kept);
            for (int64_t j = 0, n = 0; j < p.numel; j++)
                if (!unrotated_key_bias(&cfg, &p, j)) g[n] = p.data[j], w[n] = want[j], b[n] = init[j], n++;
            compare(p.name, g, w, b, kept, 1e-3, 0);
            free(g), free(w), free(b);
        } else {
            compare(p.name, p.data, want, init, p.numel, 1e-3, 0);
        }
        free(want);
        free(init);
    }
    free(losses), free(norms), free(logits), free(want_logits), free(want_loss);
    free(tok), free(tgt);
    hg_model_free(m);
    hg_st_close(f);
}

/* The worst |loss[k] - ref[k]| over the ten steps of PyTorch's bf16 autocast run of this
 * fixture (tests/fixtures/autocast.json), or -1 when the file has none. */
static double autocast_deviation(const char *path, const double *ref) {
    FILE *fp = fopen("fixtures/autocast.json", "rb");
    if (!fp) return -1.0;
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "fixtures"), base);
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(e, "losses");
    double worst = -1.0;
    if (cJSON_GetArraySize(l) == 10) {
        worst = 0.0;
        for (int k = 0; k < 10; k++) worst = fmax(worst, fabs(cJSON_GetArrayItem(l, k)->valuedouble - ref[k]));
    }
    cJSON_Delete(j);
    return worst;
}

/* Cosine similarity of got and want, p's gradient and its reference, skipping the
 * unrotated key bias entries. */
static double cosine(const float *got, const double *want, const hg_config *cfg, const hg_param_info *p) {
    double gw = 0, gg = 0, ww = 0;
    for (int64_t i = 0; i < p->numel; i++) {
        if (unrotated_key_bias(cfg, p, i)) continue;
        gw += got[i] * want[i], gg += (double)got[i] * got[i], ww += want[i] * want[i];
    }
    return gg > 0 && ww > 0 ? gw / sqrt(gg * ww) : (gg == ww ? 1.0 : 0.0);
}

/* bf16 gradients (hg_options.grad_precision) in fp32 compute: after one backward each
 * is its fp32 gradient g rounded to nearest even, bit for bit (its window holds exactly
 * what the fp32 buffer would), and after the same batch again round(round(g) + g): one
 * rounding a micro-batch. */
static void check_grad_rounding(hg_st_file *f) {
    hg_config cfg;
    int B, T;
    hg_model *m32 = load_model(f, &cfg, &B, &T, HG_PRECISION_FP32, HG_PRECISION_FP32, HG_PRECISION_FP32);
    hg_model *m16 = load_model(f, &cfg, &B, &T, HG_PRECISION_FP32, HG_PRECISION_FP32, HG_PRECISION_BF16);
    int32_t *tok, *tgt;
    read_batch(f, B * T, &tok, &tgt);
    float l = NAN;
    int bad = 0, checked = 0;
    CHECK_OK(hg_forward_backward(m32, tok, tgt, B, T, 1.0f, &l)); /* g, in fp32 */
    for (int step = 0; step < 2; step++) {
        CHECK_OK(hg_forward_backward(m16, tok, tgt, B, T, 1.0f, &l));
        for (int i = 0; i < hg_param_count(m32); i++) {
            hg_param_info p;
            CHECK_OK(hg_param_at(m16, i, &p));
            bad += !(p.grad == NULL && p.grad_bf16 && p.grad_dtype == HG_PRECISION_BF16);
            float *g = malloc(sizeof(float) * (size_t)p.numel), *got = malloc(sizeof(float) * (size_t)p.numel);
            CHECK_OK(hg_param_read(m32, i, HG_PARAM_GRAD, g));
            CHECK_OK(hg_param_read(m16, i, HG_PARAM_GRAD, got));
            for (int64_t j = 0; j < p.numel; j++) {
                float w = bf16_to_f32(f32_to_bf16(g[j]));
                if (step) w = bf16_to_f32(f32_to_bf16(w + g[j]));
                bad += memcmp(&w, &got[j], 4) != 0;
                checked++;
            }
            free(g), free(got);
        }
    }
    printf("  bf16 gradients: %d of %d elements not their fp32 gradient's rounding\n", bad, checked);
    CHECK(bad == 0);
    free(tok), free(tgt);
    hg_model_free(m32);
    hg_model_free(m16);
}

static void check_fixture_bf16(const char *path) {
    printf("%s in bf16\n", path);
    hg_st_file *f;
    CHECK_OK(hg_st_open(&f, path));
    if (!f) return;
    hg_config cfg;
    int B, T;
    hg_model *m = load_model(f, &cfg, &B, &T, HG_PRECISION_BF16, HG_PRECISION_FP32, HG_PRECISION_FP32);
    const int N = B * T;
    const int verbose = getenv("HG_TEST_VERBOSE") != NULL;
    double *want_loss = read_f64(f, "loss", 1);
    int32_t *tok, *tgt;
    read_batch(f, N, &tok, &tgt);
    float loss = NAN;
    CHECK_OK(hg_forward_backward(m, tok, tgt, B, T, 1.0f, &loss));
    CHECK_CLOSE(loss, want_loss[0], 1e-2, 0);
    for (int i = 0; i < hg_param_count(m); i++) {
        hg_param_info p;
        CHECK_OK(hg_param_at(m, i, &p));
        char name[160];
        snprintf(name, sizeof name, "grad.%s", p.name);
        double *want = read_f64(f, name, p.numel);
        double c = cosine(p.grad, want, &cfg, &p);
        if (verbose) printf("  %-48s cosine %.6f\n", name, c);
        if (!(c >= 0.999)) {
            fprintf(stderr, "%s in bf16: cosine similarity %.6f with the reference (want >= 0.999)\n", name, c);
            check_failures++;
        }
        free(want);
    }
    hg_model_free(m);
    hg_adamw a = read_adamw(f);
    double *losses = read_f64(f, "adamw.losses", 10);
    double ac = autocast_deviation(path, losses);
    CHECK(ac >= 0); /* every fixture has its autocast run */
    /* bf16 compute with fp32 and with bf16 moments, and fp32 compute with bf16 moments,
     * each within `bound` times autocast's distance (below) */
    static const struct { hg_precision compute, state, grads; const char *what; double bound; } runs[] = {
        {HG_PRECISION_BF16, HG_PRECISION_FP32, HG_PRECISION_FP32, "bf16", 2.0},
        {HG_PRECISION_BF16, HG_PRECISION_BF16, HG_PRECISION_FP32, "bf16, bf16 moments", 2.5},
        {HG_PRECISION_FP32, HG_PRECISION_BF16, HG_PRECISION_FP32, "fp32, bf16 moments", 0.25},
        {HG_PRECISION_FP32, HG_PRECISION_FP32, HG_PRECISION_BF16, "fp32, bf16 gradients", 0.1},
        {HG_PRECISION_BF16, HG_PRECISION_BF16, HG_PRECISION_BF16, "bf16, bf16 moments and gradients", 2.5}};
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        double worst = 0.0;
        m = load_model(f, &cfg, &B, &T, runs[r].compute, runs[r].state, runs[r].grads);
        for (int k = 0; k < 10; k++) {
            float l = NAN, gn = NAN;
            CHECK_OK(hg_zero_grad(m));
            CHECK_OK(hg_forward_backward(m, tok, tgt, B, T, 1.0f, &l));
            CHECK_OK(hg_optimizer_step(m, &a, &gn));
            CHECK_CLOSE(l, losses[k], 1e-2, 0);
            worst = fmax(worst, fabs(l - losses[k]));
            if (verbose) printf("  %s, step %d: loss - float64 %.2e\n", runs[r].what, k, l - losses[k]);
        }
        printf("  ten steps (%s): worst |loss - float64| %.3g (%.2g relative), %.2f times PyTorch bf16 autocast's %.3g\n",
               runs[r].what, worst, worst / losses[0], worst / ac, ac);
        if (ac >= 0 && !(worst <= runs[r].bound * ac + 1e-5 * losses[0])) {
            fprintf(stderr, "%s (%s): worst step %.3g from the float64 losses, over %.2f times autocast's %.3g\n", path,
                    runs[r].what, worst, runs[r].bound, ac);
            check_failures++;
        }
        hg_model_free(m);
    }
    free(losses), free(want_loss), free(tok), free(tgt);
    check_grad_rounding(f);
    hg_st_close(f);
}

int main(void) {
    check_fixture("fixtures/gpt2_odd.safetensors");
    check_fixture("fixtures/gpt2_tiny.safetensors");
    check_fixture("fixtures/llama_gqa.safetensors");
    check_fixture("fixtures/qwen2_bias.safetensors");
    check_fixture("fixtures/qwen3_qknorm.safetensors");
    check_fixture("fixtures/gemma_geglu.safetensors");
    check_fixture("fixtures/gemma2_sandwich.safetensors");
    check_fixture("fixtures/phi3_partial.safetensors");
    check_fixture("fixtures/olmo2_postnorm.safetensors");
    check_fixture("fixtures/phi2_parallel.safetensors");
    /* packed documents with loss masks (positions restart per document), and sliding
     * windows shorter than the documents: tools/gen_gpt2_fixture.py and
     * tools/gen_llama_fixture.py */
    check_fixture("fixtures/gpt2_packed.safetensors");
    check_fixture("fixtures/llama_packed.safetensors");
    check_fixture("fixtures/gemma2_packed.safetensors");
    check_fixture("fixtures/mistral_window.safetensors");
    static const char *const bf16[] = {"fixtures/gpt2_odd.safetensors",       "fixtures/gpt2_tiny.safetensors",
                                       "fixtures/llama_gqa.safetensors",      "fixtures/qwen2_bias.safetensors",
                                       "fixtures/qwen3_qknorm.safetensors",   "fixtures/gemma_geglu.safetensors",
                                       "fixtures/gemma2_sandwich.safetensors", "fixtures/phi3_partial.safetensors",
                                       "fixtures/olmo2_postnorm.safetensors", "fixtures/phi2_parallel.safetensors",
                                       "fixtures/gpt2_packed.safetensors",    "fixtures/llama_packed.safetensors",
                                       "fixtures/gemma2_packed.safetensors",  "fixtures/mistral_window.safetensors"};
    for (size_t i = 0; i < sizeof bf16 / sizeof bf16[0]; i++) check_fixture_bf16(bf16[i]);
    CHECK_DONE();
}
